"""The default serializer's encoding and its decoders, without a database: what each annotation
decodes to, what passes through as plain JSON (no decoder at all: the fast path), and what is
refused; annotations that do not resolve leave their argument as JSON and the others decoded."""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal, NewType, TypedDict

import pytest

from skiplock import App
from skiplock.serializer import ArgumentDecodeError, Arguments, JSONSerializer, PlainJSON

if TYPE_CHECKING:
    from collections import OrderedDict  # a name only type checkers see

S = JSONSerializer()
OrderId = NewType("OrderId", uuid.UUID)


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Shape(TypedDict):
    sides: int


@dataclass
class Point:
    x: int
    at: datetime | None = None


def encoded(value: Any) -> Any:
    return json.loads(json.dumps(value, default=S.encode))


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (datetime, datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)),
        (date, date(2026, 1, 2)),
        (time, time(23, 59, 1)),
        (uuid.UUID, uuid.UUID(int=12345)),
        (Decimal, Decimal("-0.000001")),
        (Color, Color.BLUE),
        (Point, Point(1, datetime(2026, 1, 1))),
        (list[Decimal], [Decimal("1.5"), Decimal("2")]),
        (tuple[date, ...], (date(2026, 1, 1), date(2026, 1, 2))),
        (tuple[int, Color], (1, Color.RED)),
        (set[uuid.UUID], {uuid.UUID(int=1), uuid.UUID(int=2)}),
        (frozenset[int], frozenset({1, 2})),
        (dict[str, Point], {"a": Point(2)}),
        (datetime | None, None),
        (date | None, date(2026, 5, 5)),
        (Annotated[Decimal, "money"], Decimal("3.10")),
        (OrderId, uuid.UUID(int=9)),
        (str | datetime, "not a time"),
        (int | datetime, datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)
def test_values_round_trip_through_their_annotation(annotation: Any, value: Any) -> None:
    decoder = S.decoder(annotation)
    assert decoder is not None
    back = decoder(encoded(value))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize(
    "annotation",
    [int, str, float, bool, dict, list, Any, object, list[int], dict[str, Any], Shape,
     Literal["a", "b"], int | None, list[str] | None, "Unresolved"],
)  # fmt: skip
def test_plain_json_annotations_have_no_decoder(annotation: Any) -> None:
    assert S.decoder(annotation) is None
    assert PlainJSON().decoder(datetime) is None


def test_a_dataclass_decoder_takes_only_its_fields() -> None:
    decoder = S.decoder(Point)
    assert decoder is not None
    with pytest.raises(TypeError, match="Point has no field 'y'"):
        decoder({"x": 1, "y": 2})
    with pytest.raises((TypeError, ValueError), match=r"Point\.at: Invalid isoformat string"):
        decoder({"x": 1, "at": "soon"})
    with pytest.raises(TypeError, match="expected an object for Point, got an array"):
        decoder([1])


def test_the_payload_names_no_class_to_build() -> None:
    """A JSON object stays a dict for a parameter that does not name a class, whatever keys it
    holds: the serializer reads no type name from the payload."""

    def task(data: Any, items: dict[str, Any]) -> None: ...

    arguments = Arguments(task, S)
    payload = {"data": {"__class__": "os.system", "py/object": "subprocess.Popen"}, "items": {}}
    assert arguments.decode(payload) == payload
    assert arguments.decoders == {}


def test_unencodable_values_raise_type_error() -> None:
    for value in (1j, b"x", object(), Decimal("NaN"), Decimal("Infinity")):
        with pytest.raises(TypeError):
            S.encode(value)
    with pytest.raises(TypeError, match="plain JSON"):
        PlainJSON().encode(date(2026, 1, 1))


def test_an_annotation_that_does_not_resolve_leaves_the_others_decoded() -> None:
    def task(order: OrderedDict[str, int], when: datetime, amount: Decimal) -> None: ...

    arguments = Arguments(task, S)
    decoded = arguments.decode({"order": {"a": 1}, "when": "2026-01-01T00:00:00Z", "amount": "1"})
    assert decoded == {
        "order": {"a": 1},
        "when": datetime(2026, 1, 1, tzinfo=UTC),
        "amount": Decimal(1),
    }


@dataclass
class Order:
    items: OrderedDict[str, int]  # does not resolve at run time
    placed: date


def test_a_dataclass_field_that_does_not_resolve_stays_json() -> None:
    decoder = S.decoder(Order)
    assert decoder is not None
    assert decoder({"items": {"a": 1}, "placed": "2026-01-01"}) == Order(
        {"a": 1},  # type: ignore[arg-type]
        date(2026, 1, 1),
    )


def test_a_decode_error_names_the_argument() -> None:
    def task(when: datetime, color: Color) -> None: ...

    with pytest.raises(ArgumentDecodeError, match="argument 'color': ValueError: 3 is not"):
        Arguments(task, S).decode({"when": "2026-01-01", "color": 3})


def test_a_context_task_plans_no_decoder_for_its_context() -> None:
    from skiplock import JobContext

    app = App("postgresql://nowhere/none")

    @app.task(name="plain", pass_context=True)
    def plain(ctx: JobContext, n: int) -> None: ...

    @app.task(name="typed", pass_context=True)
    def typed(ctx: JobContext, when: datetime) -> datetime:
        return when

    assert plain.decoding.decoders == {}
    assert list(typed.decoding.decoders) == ["when"]
    assert typed.decode_result("2026-01-01T00:00:00+00:00") == datetime(2026, 1, 1, tzinfo=UTC)
    assert typed.decode_result(None) is None
