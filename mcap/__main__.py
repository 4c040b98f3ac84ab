"""``python -m mcap``: the command line lives in :mod:`mcap.cli.main`."""
import sys

if __name__ == "__main__":
    # A command that will fork CPU stage processes starts their zygote now, while the
    # command line is read (mcap.runner.early: a one-off measure's start-up, issue 42).
    from mcap.runner import early
    early.maybe_start(sys.argv[1:])

from mcap.cli.main import main  # noqa: E402

if __name__ == "__main__":
    code = main()
    # A command that imported torch leaves a heap the interpreter's exit would collect
    # object by object, a second or more after the work is done (a one-off measure waited
    # for it; issue 42, item 6): freeze it first. Exit handlers and finalizers still run.
    import gc
    gc.freeze()
    sys.exit(code)
