"""The ``skiplock`` command line: one module per command group (the entry point is ``main``)."""
