"""Worker-side modules: the no-op task of each system, loaded by that system's own CLI.

Every handler calls :func:`bench.apps.record.record` with the job's sequence number; the
recorder writes what it saw when the worker process exits (see :mod:`bench.apps.record`).
"""
