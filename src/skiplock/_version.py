"""The package's version, in a module of its own: the worker's presence row and the tracer
read it without importing the package root, which imports them while it loads."""

from __future__ import annotations

__version__ = "0.1.0"
