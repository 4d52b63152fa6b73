"""Find the :class:`~skiplock.App` a command names as ``module:attribute``."""

from __future__ import annotations

import importlib
import os
import sys

import click

from skiplock.app import App


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory is importable)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected module:attribute, got {spec!r}", param_hint="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    if not hasattr(module, attribute):
        raise click.BadParameter(
            f"no attribute {attribute} in {module_name} "
            "(APP is module:attribute, naming a skiplock.App)",
            param_hint="APP",
        )
    app = getattr(module, attribute)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a skiplock.App", param_hint="APP")
    return app
