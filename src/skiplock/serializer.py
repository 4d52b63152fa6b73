"""How task arguments and results become JSON and come back as the types a task declares.

A job's payload stays a plain JSON object whatever the serializer: a datetime is written as its
ISO 8601 text, a Decimal as its digits in a string, a dataclass or a pydantic model as an object
of its fields.  The JSON carries no type names: the worker rebuilds each argument from the
annotation of the task's parameter, so any producer that writes JSON can enqueue, and no payload
can make a worker instantiate a class its task does not name (see docs/tasks.md; the cost:
docs/design.md, "Typed task arguments: the serializer's cost").
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol, runtime_checkable

__all__ = ["Decoder", "JSONSerializer", "PlainJSON", "Serializer"]

# A function turning the JSON form of a value into the value (ValueError or TypeError if it
# cannot).
Decoder = Callable[[Any], Any]

_JSON_SCALARS = (str, int, float, bool, type(None))


@runtime_checkable
class Serializer(Protocol):
    """What turns task arguments and results into JSON and back.

    ``encode`` is called for each value the JSON encoder cannot write itself (neither str, int,
    float, bool, None, nor a list, tuple or dict of them): it returns a JSON-compatible stand-in
    (which may hold further values to encode), or raises TypeError.  ``decoder`` is called once
    per parameter of a task (and for its return annotation), with the annotation: it returns a
    function that turns the JSON value into the annotated type, or None to pass the JSON value
    as it is (the fast path: a task whose parameters need no decoder costs nothing more).
    """

    def encode(self, value: Any) -> Any: ...

    def decoder(self, annotation: Any) -> Decoder | None: ...


class PlainJSON:
    """Plain JSON only, as the payload is written: nothing encoded, nothing decoded."""

    def encode(self, value: Any) -> Any:
        raise TypeError(f"{type(value).__qualname__} is not JSON (this task takes plain JSON)")

    def decoder(self, annotation: Any) -> Decoder | None:
        return None


class JSONSerializer:
    """The default serializer: datetime, date, time (ISO 8601 text), UUID (its text), Decimal
    (its digits, in a string), enum members (their value), dataclasses and pydantic models
    (objects of their fields), tuples, sets and frozensets (arrays); decoded back into the
    parameter's annotation, including ``list[X]``, ``dict[str, X]``, ``X | None`` and the
    fields of dataclasses.  Pydantic models are validated by pydantic (when installed)."""

    def encode(self, value: Any) -> Any:
        exact = _BY_TYPE.get(type(value))
        if exact is not None:  # the common types, found in one look-up
            return exact(value)
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, uuid.UUID | Decimal):
            if isinstance(value, Decimal) and not value.is_finite():
                raise TypeError(f"a Decimal must be finite, not {value}")
            return str(value)
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, set | frozenset):
            return list(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        model_dump = _pydantic_dump(value)
        if model_dump is not None:
            return model_dump()
        raise TypeError(
            f"{type(value).__qualname__} is not a type skiplock's JSONSerializer encodes (JSON "
            "values, datetime, date, time, UUID, Decimal, enums, dataclasses, pydantic models)"
        )

    def decoder(self, annotation: Any) -> Decoder | None:
        return _decoder(annotation, self)


def _finite_decimal(value: Decimal) -> str:
    if not value.is_finite():
        raise TypeError(f"a Decimal must be finite, not {value}")
    return str(value)


_BY_TYPE: dict[type, Callable[[Any], Any]] = {
    datetime: datetime.isoformat,
    date: date.isoformat,
    time: time.isoformat,
    uuid.UUID: str,
    Decimal: _finite_decimal,
}


def _pydantic_dump(value: Any) -> Callable[[], Any] | None:
    """``model_dump(mode="json")`` of a pydantic model; None for anything else (and always
    when pydantic was never imported: a model exists only if it was)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(value, pydantic.BaseModel):
        return None
    return functools.partial(value.model_dump, mode="json")


def _decoder(annotation: Any, serializer: Serializer) -> Decoder | None:
    """A decoder of the JSON form of ``annotation``'s values, None when the JSON value is one
    already.  Only the classes the annotation names are ever made."""
    if annotation is Any or annotation is inspect.Parameter.empty or annotation is object:
        return None
    if isinstance(annotation, typing.NewType):
        return serializer.decoder(annotation.__supertype__)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return serializer.decoder(annotation.__origin__)
    if origin is not None:
        return _generic_decoder(annotation, origin, serializer)
    if not isinstance(annotation, type):
        return None  # a TypeVar, a string that did not resolve, a Literal's values, ...
    if annotation in _JSON_SCALARS or annotation in (dict, list):
        return None
    if annotation is datetime:
        return _from_text(annotation, datetime.fromisoformat)
    if annotation is date:
        return _from_text(annotation, date.fromisoformat)
    if annotation is time:
        return _from_text(annotation, time.fromisoformat)
    if annotation is uuid.UUID:
        return _from_text(annotation, uuid.UUID)
    if annotation is Decimal:
        return _decimal
    if issubclass(annotation, enum.Enum):
        return annotation
    if annotation in (tuple, set, frozenset):
        return functools.partial(_sequence, annotation, None)
    if dataclasses.is_dataclass(annotation):
        return _DataclassDecoder(annotation, serializer)
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and issubclass(annotation, pydantic.BaseModel):
        return typing.cast(Decoder, typing.cast(Any, annotation).model_validate)
    return None  # a class it does not know (a TypedDict, say): the JSON value as it is


def _generic_decoder(annotation: Any, origin: Any, serializer: Serializer) -> Decoder | None:
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        decoders = [serializer.decoder(a) for a in members]
        if all(d is None for d in decoders):
            return None
        return functools.partial(_union, len(members) < len(args), members, decoders)
    if origin is typing.Literal:
        return None
    if origin in (list, set, frozenset) or (origin is tuple and args[1:] == (Ellipsis,)):
        item = serializer.decoder(args[0]) if args else None
        if item is None and origin is list:
            return None
        return functools.partial(_sequence, origin, item)
    if origin is tuple:
        items = [serializer.decoder(a) for a in args]
        return functools.partial(_fixed_tuple, items)
    if origin in (dict, Mapping):
        value = serializer.decoder(args[1]) if len(args) == 2 else None
        if value is None:
            return None
        return functools.partial(_mapping, value)
    return None


def _from_text(cls: type, parse: Callable[[str], Any]) -> Decoder:
    def decode(value: Any) -> Any:
        if not isinstance(value, str):
            raise TypeError(f"expected {cls.__name__} as text, got {_json_type(value)}")
        return parse(value)

    return decode


def _decimal(value: Any) -> Decimal:
    if type(value) is str:
        try:
            return Decimal(value)
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a decimal number") from None
    if type(value) is int:
        return Decimal(value)
    if type(value) is float:
        return Decimal(repr(value))  # the number as written, not its binary expansion
    raise TypeError(f"expected Decimal as text or a number, got {_json_type(value)}")


def _sequence(kind: type, item: Decoder | None, value: Any) -> Any:
    if not isinstance(value, list):
        raise TypeError(f"expected an array for {kind.__name__}, got {_json_type(value)}")
    return kind(value if item is None else map(item, value))


def _fixed_tuple(items: list[Decoder | None], value: Any) -> tuple[Any, ...]:
    if not isinstance(value, list) or len(value) != len(items):
        raise TypeError(f"expected an array of {len(items)} items, got {_json_type(value)}")
    return tuple(v if d is None else d(v) for d, v in zip(items, value, strict=True))


def _mapping(value_decoder: Decoder, value: Any) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    return {k: value_decoder(v) for k, v in value.items()}


def _union(optional: bool, members: list[Any], decoders: list[Decoder | None], value: Any) -> Any:
    """The value as the first member of the union that takes it: a JSON scalar already of a
    member's type stays as it is (a str for ``str | datetime``), then each decoder is tried."""
    if value is None and optional:
        return None
    for member, decoder in zip(members, decoders, strict=True):
        if decoder is None and member in _JSON_SCALARS and isinstance(value, member):
            return value
    problems = []
    for decoder in decoders:
        if decoder is not None:
            try:
                return decoder(value)
            except (TypeError, ValueError) as exc:
                problems.append(str(exc))
    if any(d is None for d in decoders):
        return value  # a member that takes JSON as it is (a TypedDict, list[int], ...) gets it
    raise TypeError("; ".join(problems))


class _DataclassDecoder:
    """Makes the dataclass from an object of its fields, each decoded by its annotation."""

    def __init__(self, cls: type, serializer: Serializer) -> None:
        self.cls = cls
        self.serializer = serializer
        self._fields: dict[str, Decoder | None] | None = None

    def fields(self) -> dict[str, Decoder | None]:
        """Each field's decoder, found on first use (the class's annotations resolve by then)."""
        if self._fields is None:
            try:
                hints = typing.get_type_hints(self.cls)
            except Exception:  # a field's annotation does not resolve: that field stays JSON
                hints = _hints_one_by_one(self.cls)
            self._fields = {
                f.name: self.serializer.decoder(hints.get(f.name, Any))
                for f in dataclasses.fields(self.cls)
                if f.init
            }
        return self._fields

    def __call__(self, value: Any) -> Any:
        if type(value) is not dict:
            raise TypeError(f"expected an object for {self.cls.__name__}, got {_json_type(value)}")
        fields = self._fields or self.fields()
        if not value.keys() <= fields.keys():
            unknown = sorted(value.keys() - fields.keys())[0]
            raise TypeError(f"{self.cls.__name__} has no field {unknown!r}")
        kwargs = {}
        for name, item in value.items():
            decoder = fields[name]
            try:
                kwargs[name] = item if decoder is None else decoder(item)
            except (TypeError, ValueError) as exc:
                kind = TypeError if isinstance(exc, TypeError) else ValueError
                raise kind(f"{self.cls.__name__}.{name}: {exc}") from None
        return self.cls(**kwargs)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


DEFAULT_SERIALIZER = JSONSerializer()


class Arguments:
    """The decoders of one task's parameters and return value, made on first use (when the
    module that defines the task has been imported fully, so its annotations resolve)."""

    def __init__(
        self, fn: Callable[..., Any], serializer: Serializer, *, pass_context: bool = False
    ) -> None:
        self.fn = fn
        self.serializer = serializer
        self.pass_context = pass_context  # the first parameter takes the JobContext

    @functools.cached_property
    def _hints(self) -> dict[str, Any]:
        try:
            return typing.get_type_hints(self.fn)
        except Exception:
            # An annotation that does not resolve (a name imported only for type checkers): the
            # others still decode, read one by one.
            return _hints_one_by_one(self.fn)

    @functools.cached_property
    def decoders(self) -> dict[str, Decoder]:
        """Per parameter that needs one, its decoder; empty for a task of plain JSON."""
        found = {}
        params = list(inspect.signature(self.fn).parameters.values())
        if self.pass_context and params and params[0].kind != params[0].VAR_POSITIONAL:
            params = params[1:]
        for param in params:
            name = param.name
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            decoder = self.serializer.decoder(self._hints.get(name, Any))
            if decoder is not None:
                found[name] = decoder
        return found

    @functools.cached_property
    def result_decoder(self) -> Decoder | None:
        return self.serializer.decoder(self._hints.get("return", Any))

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the task's call; :class:`ArgumentDecodeError` naming the
        argument that does not decode."""
        decoders = self.decoders
        if not decoders:
            return payload
        kwargs = dict(payload)
        for name, decoder in decoders.items():
            if name in kwargs:
                try:
                    kwargs[name] = decoder(kwargs[name])
                except Exception as exc:
                    raise ArgumentDecodeError(name, exc) from exc
        return kwargs


def _hints_one_by_one(owner: Any) -> dict[str, Any]:
    """The annotations of a function or a class that resolve in its module, one by one (they
    are its own source, evaluated as ``typing.get_type_hints`` would)."""
    module = sys.modules.get(getattr(owner, "__module__", ""), None)
    namespace = dict(vars(module)) if module is not None else {}
    hints = {}
    for name, annotation in getattr(owner, "__annotations__", {}).items():
        try:
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
        except Exception:
            continue  # unresolved: the JSON value as it is
    return hints


class ArgumentDecodeError(ValueError):
    """A job's argument that its task's serializer cannot turn into the parameter's type."""

    def __init__(self, name: str, exc: BaseException) -> None:
        super().__init__(f"argument {name!r}: {type(exc).__name__}: {exc}")
        self.argument = name
