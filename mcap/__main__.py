"""``python -m mcap``: the command line lives in :mod:`mcap.cli.main`."""
import sys

from mcap.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
