"""Queue weights: the order of a worker's queues from claim to claim, and ``--queues a=3,b``."""

from __future__ import annotations

import click
import pytest

from skiplock._cli.worker import parse_queues
from skiplock._runtime.queue_turns import QueueTurns


def test_equal_weights_rotate_the_queues() -> None:
    turns = QueueTurns()
    firsts = [turns.next(["a", "b", "c"]) for _ in range(4)]
    assert firsts == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_a_queue_comes_first_as_often_as_its_weight_says_spread_out() -> None:
    turns = QueueTurns({"a": 3, "b": 1})
    firsts = [turns.next(["a", "b"])[0] for _ in range(8)]
    assert firsts.count("a") == 6 and firsts.count("b") == 2
    assert "b" in firsts[:4] and "b" in firsts[4:]  # not all of a's turns in a row


def test_the_cli_reads_weights_after_the_queue_names() -> None:
    assert parse_queues("a=3, b,c:x=2") == {"a": 3, "b": 1, "c:x": 2}
    for bad in ("a=0", "a=x", "a=1.5"):
        with pytest.raises(click.BadParameter):
            parse_queues(bad)
