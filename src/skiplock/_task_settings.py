"""A task's settings, as App.task declares them, each option checked at registration."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from skiplock._db.bounds import check_queue_name
from skiplock._db.enqueue import EnqueueOptions, build_job
from skiplock.errors import ConfigurationError
from skiplock.retry import ExponentialBackoff, RetryPolicy
from skiplock.serializer import Serializer

WorkerModel = Literal["lease", "held"]
ExceptionTypes = type[BaseException] | Iterable[type[BaseException]]


class SettingsApp(Protocol):
    """What checking a task's settings reads of its app."""

    @property
    def default_queue(self) -> str: ...
    @property
    def max_payload_bytes(self) -> int: ...
    @property
    def completion(self) -> str: ...


@dataclass(frozen=True)
class TaskSettings:
    name: str
    options: EnqueueOptions
    retry: RetryPolicy
    model: WorkerModel | None
    pass_context: bool
    timeout: float | None = None
    secret: frozenset[str] = frozenset()
    store_result: bool = False
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    no_retry_on: tuple[type[BaseException], ...] = ()
    serializer: Serializer | None = None  # None: the app's


def exception_types(value: ExceptionTypes, option: str) -> tuple[type[BaseException], ...]:
    """An exception class or an iterable of them, as a tuple for ``isinstance``."""
    found: tuple[object, ...]
    if isinstance(value, (type, str)):
        found = (value,)
    else:
        try:
            found = tuple(value)
        except TypeError:
            found = (value,)
    for cls in found:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise ConfigurationError(
                f"{option} takes exception classes (one, or a tuple of them), got {cls!r}"
            )
    return cast(tuple[type[BaseException], ...], found)


def checked_settings(
    app: SettingsApp,
    name: str,
    *,
    queue: str | None,
    priority: int,
    max_attempts: int,
    retry: RetryPolicy | None,
    model: WorkerModel | None,
    pass_context: bool,
    timeout: float | None,
    secret: Iterable[str],
    store_result: bool,
    retry_on: ExceptionTypes,
    no_retry_on: ExceptionTypes,
    serializer: Serializer | None = None,
) -> TaskSettings:
    """The settings of a task registered with :meth:`App.task`, each option checked."""
    if model not in (None, "lease", "held"):
        raise ConfigurationError(f"model must be 'lease' or 'held', got {model!r}")
    checked_serializer(serializer)
    options = EnqueueOptions(
        queue=check_queue_name(queue or app.default_queue),
        priority=priority,
        max_attempts=max_attempts,
    )
    build_job(name, {}, options, max_payload_bytes=app.max_payload_bytes)
    if timeout is not None and not timeout > 0:
        raise ConfigurationError(f"timeout must be > 0 seconds, got {timeout!r}")
    if isinstance(secret, str):
        raise ConfigurationError("secret must be a list of field names, not a string")
    if store_result and app.completion == "delete":
        raise ConfigurationError(
            f"task {name!r} stores its result, but this app deletes done jobs "
            "(completion='delete'): keep them (completion='keep' or 'archive')"
        )
    return TaskSettings(
        name,
        options,
        retry or ExponentialBackoff(),
        model,
        pass_context,
        timeout,
        frozenset(secret),
        store_result,
        exception_types(retry_on, "retry_on"),
        exception_types(no_retry_on, "no_retry_on"),
        serializer,
    )


def checked_serializer(serializer: Serializer | None) -> Serializer | None:
    """``serializer`` if it has what a :class:`~skiplock.serializer.Serializer` has."""
    if isinstance(serializer, type):
        raise ConfigurationError(
            f"serializer takes an instance, not the class: {serializer.__name__}()"
        )
    if serializer is not None and not isinstance(serializer, Serializer):
        raise ConfigurationError(
            f"serializer must have encode(value) and decoder(annotation) methods (see "
            f"skiplock.serializer.Serializer), got {serializer!r}"
        )
    return serializer
