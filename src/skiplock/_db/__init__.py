"""The database seam: every statement skiplock runs, the connections it runs them on, and the
schema.

The async modules are the source; each ``*_sync`` twin is generated from its async module by
``tools/async_to_sync.py``.  Nothing outside this package writes or runs SQL (the doctor, the
demo and ``skiplock roles`` too run theirs through ``doctor.py``, ``demo.py`` and ``roles.py``
here), a method is named after the statement it runs, and nothing here imports the worker
runtime or the faces: see docs/design.md, "The database seam", and tests/unit/test_seam.py.
"""
