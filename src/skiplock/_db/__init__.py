"""The database seam: every statement skiplock runs, the connections it runs them on, and the
schema.

The async modules are the source; each ``*_sync`` twin is generated from its async module by
``tools/async_to_sync.py``.  Nothing outside this package writes SQL.
"""
