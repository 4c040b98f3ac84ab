"""MPress's runtime (issue 16): a plan applied inside a stage process (``apply.py``:
recompute, host swap), device-to-device swap between stage processes (``d2d.py``), whether a
plan can run (``check.py``, no torch), and MPress's statistics measured (``stats.py``)."""
