"""The database seam's stores for the tests, from one place.

Most tests take the ``store`` / ``async_store`` fixtures (tests/conftest.py): the statements of
the test's own schema.  A store for another schema or App (a second app, a subprocess, a chaos
run) comes from :func:`sync_store` / :func:`async_store`; the classes are re-exported here for
annotations, so no test imports the private ``skiplock._db.store_*`` modules itself.
"""

from __future__ import annotations

from skiplock import App
from skiplock._db.sql import Queries
from skiplock._db.store_async import AsyncStore
from skiplock._db.store_sync import SyncStore

__all__ = ["AsyncStore", "SyncStore", "async_store", "sync_store"]


def _queries(of: App | Queries | str) -> Queries:
    if isinstance(of, App):
        return of.queries
    return of if isinstance(of, Queries) else Queries(of)


def sync_store(of: App | Queries | str) -> SyncStore:
    """A SyncStore with the statements of an App's schema (or of a schema name, or Queries)."""
    return SyncStore(_queries(of))


def async_store(of: App | Queries | str) -> AsyncStore:
    """An AsyncStore with the statements of an App's schema (or of a schema name, or Queries)."""
    return AsyncStore(_queries(of))
