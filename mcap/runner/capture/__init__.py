"""CAPTURE's runtime (section III): one device of a hybrid plan in this process
(``device.py``: data- and tensor-parallel stages over their sub-groups, the pipeline links
between stages). Engine ``hybrid`` (``mcap.runner.engines.hybrid``) drives it."""
