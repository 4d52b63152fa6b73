"""Shared test helpers, imported as ``helpers.*`` (tests/ is on the path): see tests/README.md."""
