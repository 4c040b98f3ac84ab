"""The command line: ``python -m mcap <command> ...``.

Each command group lives in its own module exposing ``register(subparsers)``; a command
is a function taking the parsed args and returning an exit code. Any ``McapError``
becomes a one-line message and exit code 2, never a traceback; so does what torch or the
system refuses (memory, a file), and a bug in mcap is one line and exit 1 with a hint
(:func:`unexpected`, issue 38). The ``MCAP_*`` environment variables are checked before a
command runs (``mcap.cli.environment``).
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys

from mcap.core.errors import McapError

# Command modules, each with register(subparsers). Kept as names so `plan` does not pay
# for importing torch.
COMMAND_MODULES = tuple(f"mcap.cli.commands.{name}" for name in (
    "predict", "measure", "profile", "evaluate", "export", "press", "schedules"))


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: exit 2, one line
        # a 5,000-character argument is cut, its length named (issue 38)
        message = re.sub(r"\S{200,}", lambda m: f"{m.group()[:80]}... ({len(m.group()):,} "
                                                 "characters)", " ".join(message.split()))
        self.exit(2, f"mcap: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m mcap",  # plain words: --help prints no RST markup
                     description="mcap: memory-centric partitioning of pipeline-parallel training; "
                                 "python -m mcap COMMAND --help describes each command")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # command group not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0) return, for in-process callers
        return exc.code if isinstance(exc.code, int) else 2
    except McapError as exc:  # an option's type that refused with the library's error
        print(f"mcap: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # never a bare traceback, even from an option's type
        return unexpected(exc)
    args.argv = tuple(sys.argv[1:] if argv is None else argv)  # as given (mcap.cli.nodes)
    try:
        from mcap.cli import environment
        environment.check()  # a bad MCAP_* value exits 2 before anything runs
        check = getattr(args, "check_args", None)  # options that only make sense together
        if check is not None:
            check(args)
        return int(args.func(args) or 0)
    except McapError as exc:
        print(f"mcap: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Only commands that measure keep runs in a store (export only reads one).
        measures = args.command in ("measure", "profile", "sweep", "scale")
        print("mcap: interrupted" + ("; finished runs are kept in the store" if measures
                                     else ""), file=sys.stderr)
        return 130
    except BrokenPipeError as exc:
        if _stdout_gone():
            return 141  # 128 + SIGPIPE, as a shell pipeline's writer that head closed
        return unexpected(exc)
    except Exception as exc:  # never a bare traceback (issue 38): torch, the OS, or a bug
        return unexpected(exc)


TRACEBACK_ENV = "MCAP_TRACEBACK"


def unexpected(exc: Exception) -> int:
    """One line for an exception that is not an McapError: exit 2 for what torch or the
    system refused (memory, a file, a device), naming it; exit 1 for a bug in mcap, with
    a hint. ``$MCAP_TRACEBACK=1`` prints the traceback too."""
    import os
    import traceback
    if os.environ.get(TRACEBACK_ENV, "").strip() == "1":
        traceback.print_exception(exc, file=sys.stderr)
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    if isinstance(exc, MemoryError):
        print("mcap: error: out of memory: this machine could not give the memory the "
              "command needed (MemoryError); choose smaller sizes", file=sys.stderr)
        return 2
    if isinstance(exc, OSError):
        from mcap.files.paths import shown
        where = f" ({shown(exc.filename)})" if exc.filename is not None else ""
        print(f"mcap: error: the system refused: {exc.strerror or text}{where}", file=sys.stderr)
        return 2
    if _from_torch(exc) or _allocation(text):
        print(f"mcap: error: torch refused it: {type(exc).__name__}: {text}", file=sys.stderr)
        return 2
    print(f"mcap: internal error: {type(exc).__name__}: {text}. This is a bug in mcap, not "
          f"in your input; run again with {TRACEBACK_ENV}=1 to see where, and report it",
          file=sys.stderr)
    return 1


def _allocation(text: str) -> bool:
    """Whether a message is an allocator's refusal (torch's C++ raises it from any call)."""
    low = text.lower()
    return "can't allocate memory" in low or "out of memory" in low or "tried to allocate" in low


def _from_torch(exc: BaseException) -> bool:
    """Whether torch raised it (its class is torch's, or the innermost frame is in torch)."""
    from pathlib import PurePath
    if type(exc).__module__.startswith("torch"):  # torch, torchgpipe
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    folders = PurePath(tb.tb_frame.f_code.co_filename).parts[:-1] if tb is not None else ()
    return any(part.startswith("torch") for part in folders)


def _stdout_gone() -> bool:
    """Whether stdout's reader went away (``| head`` read enough): then stop quietly, and
    point stdout at /dev/null so the interpreter's final flush does not fail again. A
    broken pipe elsewhere (a stage process's) is not this, and is raised."""
    import os
    import select
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        return False
    if gone:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except OSError:
            pass
    return gone


if __name__ == "__main__":
    sys.exit(main())
