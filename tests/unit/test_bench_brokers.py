"""The bench's broker peers say why they cannot run, one check for all of them: a package not
installed, a broker not listening (a closed port on this machine, no mock)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import ClassVar

import pytest
from bench.system_base import Brokered
from bench.systems import CELERY, DRAMATIQ, CeleryRabbit, CeleryRedis, DramatiqRabbit, DramatiqRedis


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def test_every_broker_peer_shares_the_one_availability_check() -> None:
    peers = (*CELERY, *DRAMATIQ)
    assert {type(p) for p in peers} == {CeleryRedis, CeleryRabbit, DramatiqRedis, DramatiqRabbit}
    for peer in peers:
        assert isinstance(peer, Brokered)
        assert type(peer).available is Brokered.available, type(peer).__name__


def test_a_missing_package_is_named() -> None:
    @dataclass
    class Missing(DramatiqRedis):
        packages: ClassVar[tuple[str, ...]] = ("dramatiq", "no_such_module_for_the_bench")

    why = Missing().available()
    assert why is not None and why.startswith("no_such_module_for_the_bench is not installed")


@pytest.mark.parametrize(
    ("peer", "url"),
    [
        (CeleryRedis, "redis://127.0.0.1:{port}/11"),
        (CeleryRabbit, "amqp://guest:guest@127.0.0.1:{port}//"),
        (DramatiqRedis, "redis://127.0.0.1:{port}/12"),
        (DramatiqRabbit, "amqp://guest:guest@127.0.0.1:{port}/%2F"),
    ],
)
def test_a_broker_that_does_not_answer_is_named(
    peer: type[Brokered], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = url.format(port=closed_port())
    monkeypatch.setenv(peer.broker_env, broker)
    why = peer().available()
    assert why is not None and why.startswith(f"{broker} is not reachable"), why
