"""Loaders for the rows the admin surfaces show (``jobs list``/``show``, the dashboard): a row
that breaks a bound of the jobs table (one from before migration 0015, or written with the
constraints dropped) still shows.  A timestamp Python's datetime cannot hold (past year 9999,
``infinity``) and JSON that Python cannot decode or that is deeper than the bound come back as
the text PostgreSQL sent, instead of failing the whole page."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

from skiplock._db.payload import json_shape_error, load_json

_TIMESTAMPTZ = psycopg.postgres.types["timestamptz"].oid
_JSONB = psycopg.postgres.types["jsonb"].oid


class _TimestampOrText(Loader):
    """psycopg's own timestamptz loader, or the text when it cannot make a datetime of it."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        strict = psycopg.adapters.get_loader(oid, Format.TEXT)
        assert strict is not None
        self._strict = strict(oid, context)

    def load(self, data: Buffer) -> Any:
        try:
            return self._strict.load(data)
        except psycopg.DataError:
            return bytes(data).decode("utf-8", "replace")


class _JsonOrText(Loader):
    """The decoded JSON when it is within bounds and Python decodes it, else its text."""

    def load(self, data: Buffer) -> Any:
        text = bytes(data).decode("utf-8")
        if json_shape_error(text) is not None:
            return text
        try:
            return load_json(text)
        except (ValueError, RecursionError):
            return text


def show_any_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """Have ``cursor`` (text format) load what it cannot decode as text (see the module)."""
    cursor.adapters.register_loader(_TIMESTAMPTZ, _TimestampOrText)
    cursor.adapters.register_loader(_JSONB, _JsonOrText)
