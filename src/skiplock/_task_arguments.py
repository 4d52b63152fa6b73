"""Whether a payload fits a task function's parameters, checked at enqueue so that a job the
worker could not call is refused before it is written."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from skiplock.errors import InvalidArguments


class ArgumentCheck:
    """Whether a payload binds to a task function's parameters the way the worker calls it:
    ``fn(**payload)``, or ``fn(ctx, **payload)`` for a task that takes its context."""

    def __init__(self, name: str, fn: Callable[..., Any], pass_context: bool) -> None:
        self.name = name
        self.signature: inspect.Signature = inspect.signature(fn)
        self.context_args: tuple[Any, ...] = (None,) if pass_context else ()
        params = list(self.signature.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        # Sets for a quick yes on each enqueue; a no is confirmed (and worded) by bind().
        self.impossible: bool = False
        if pass_context and positional:
            params.remove(positional[0])
        elif pass_context and not any(p.kind == p.VAR_POSITIONAL for p in params):
            self.impossible = True  # no parameter for the context
        self.taken: set[str] = {p.name for p in positional[:1] if pass_context}
        self.var_keyword: bool = any(p.kind == p.VAR_KEYWORD for p in params)
        named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        self.accepted: set[str] = {p.name for p in named}
        self.required: set[str] = {p.name for p in named if p.default is p.empty}
        self.impossible |= any(p.kind == p.POSITIONAL_ONLY and p.default is p.empty for p in params)
        # The parameters a positional argument of enqueue() fills, by name in the payload.
        self.by_position: list[str] = [
            p.name for p in itertools.takewhile(lambda p: p.kind == p.POSITIONAL_OR_KEYWORD, params)
        ]

    def named(self, conn: Any, args: tuple[Any, ...], payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` with ``args`` (given by position after ``conn``, as the typed enqueue
        allows) under the names of the parameters they fill: a job's payload is a JSON object."""
        # A payload given as enqueue()'s only argument lands in conn: say so.  (With arguments by
        # name beside it, conn's own check says what conn must be.)
        if not payload and not args and isinstance(conn, (Mapping, str, int, float, list, tuple)):
            raise InvalidArguments(
                f"task {self.name!r}: enqueue()'s first positional argument is conn, a database "
                f"connection, not a {type(conn).__name__}: give the task's arguments by name "
                f"(it takes {', '.join(self.signature.parameters)})"
            )
        if not args:
            return payload
        if len(args) > len(self.by_position):
            raise InvalidArguments(
                f"task {self.name!r} takes at most {len(self.by_position)} positional "
                f"argument{'s' * (len(self.by_position) != 1)} in a payload, got {len(args)}"
            )
        positional = dict(zip(self.by_position, args, strict=False))
        twice = positional.keys() & payload.keys()
        if twice:
            raise InvalidArguments(
                f"task {self.name!r} got {', '.join(map(repr, sorted(twice)))} twice, "
                "by position and by name"
            )
        return {**positional, **payload}

    def check(self, payload: Mapping[str, Any]) -> None:
        """Raise :class:`InvalidArguments` unless the worker's call would bind ``payload``
        (one set comparison or two per payload: this runs for every job of a bulk enqueue)."""
        if type(payload) is not dict and not isinstance(payload, Mapping):
            return  # encode_payload refuses it, saying why
        keys = payload.keys()
        fits = keys.isdisjoint(self.taken) if self.var_keyword else keys <= self.accepted
        if fits and self.required <= keys and not self.impossible:
            return
        self._refuse(payload)

    def _refuse(self, payload: Mapping[str, Any]) -> None:
        """bind() has the last word (it raises for what the sets only suspect) and the words."""
        keys = payload.keys()
        unexpected = keys & self.taken if self.var_keyword else keys - self.accepted
        problems = [
            f"{what} {', '.join(map(repr, sorted(names)))}"
            for what, names in (
                ("unexpected argument" + "s" * (len(unexpected) > 1), unexpected),
                ("missing argument" + "s" * (len(self.required - keys) > 1), self.required - keys),
            )
            if names
        ]
        try:
            self.signature.bind(*self.context_args, **payload)
            return
        except TypeError as exc:
            problem = "; ".join(problems) or str(exc)
        params = ", ".join(
            str(p.replace(annotation=p.empty)) for p in self.signature.parameters.values()
        )
        raise InvalidArguments(
            f"task {self.name!r} cannot take these arguments: {problem} (it takes {params})"
        )


def uncallable(name: str, signature: inspect.Signature, pass_context: bool) -> str:
    """Why no job can call a function of this signature (see :class:`ArgumentCheck`)."""
    params = list(signature.parameters.values())
    takes_context = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )
    if pass_context and not takes_context:
        return (
            f"task {name!r} is declared with pass_context=True, so the worker passes the job's "
            "context as its first parameter, which it lacks: add one (ctx: JobContext)"
        )
    stuck = [p.name for p in params if p.kind == p.POSITIONAL_ONLY and p.default is p.empty]
    return (
        f"task {name!r} has the positional-only parameter {stuck[-1]!r} without a default, "
        "which no job can fill: the worker passes a job's payload by name"
    )
