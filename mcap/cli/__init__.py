"""The command line (``python -m mcap ...``): one module per command group, each with
``register(subparsers)``; :func:`mcap.cli.main.main` builds the parser and runs one."""
