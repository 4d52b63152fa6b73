"""The NOTIFY payload that asks a worker to cancel a held-lock job shares the schema's channel
with wake-ups, whose payloads are queue names: it can never be one."""

from __future__ import annotations

import pytest

from skiplock._db.bounds import check_queue_name
from skiplock._db.wakeups import cancel_payload
from skiplock.errors import InvalidName


@pytest.mark.parametrize("job_id", [1, 2**31, 2**63 - 1])
def test_a_cancel_request_is_never_a_queue_name(job_id: int) -> None:
    payload = cancel_payload(job_id)
    assert payload == f"!cancel:{job_id}"
    with pytest.raises(InvalidName):
        check_queue_name(payload)


def test_a_cancel_request_names_an_integer_id_only() -> None:
    with pytest.raises(ValueError):
        cancel_payload("1; drop")  # type: ignore[arg-type]
