"""The commands of ``python -m mcap``, one module per command group, each with
``register(subparsers)`` (``mcap.cli.main.COMMAND_MODULES`` lists them). A command module
imports the shared ``mcap.cli.options`` / ``mcap.cli.output`` and may dispatch to another
command module (``predict`` to ``capture`` and ``press``); none imports back."""
