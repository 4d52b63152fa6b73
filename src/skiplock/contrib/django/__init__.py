"""skiplock as a Django app: add ``"skiplock.contrib.django"`` to ``INSTALLED_APPS``.

- ``manage.py migrate`` creates and upgrades skiplock's tables (in skiplock's own schema, not
  as Django models), so test databases have them too (:mod:`.migrations`).
- ``manage.py skiplock worker``, ``status``, ``jobs``... are the ``skiplock`` command line with
  Django set up and the database of ``DATABASES`` (:mod:`.management.commands.skiplock`).
- :class:`DjangoApp` is an :class:`~skiplock.App` whose enqueues, with no ``conn``, write on
  Django's connection: inside ``transaction.atomic()`` the job commits or rolls back with it.

Settings, all optional: ``SKIPLOCK_APP`` (``"module:attribute"`` of the app the commands run),
``SKIPLOCK_DATABASE`` (the alias of ``DATABASES``, ``"default"``) and ``SKIPLOCK_SCHEMA``
(``"skiplock"``).  See docs/frameworks.md.
"""

from __future__ import annotations

from skiplock.contrib.django.app import DjangoApp

__all__ = ["DjangoApp"]
