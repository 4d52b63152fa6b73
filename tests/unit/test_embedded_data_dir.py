"""Where the embedded server keeps its data: the same place in every release, or an upgrade
would start an empty cluster and leave the jobs in the old one without a word."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skiplock._db.embedded import default_data_dir


def test_the_override_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SKIPLOCK_EMBEDDED_DIR", str(tmp_path / "pg"))
    assert default_data_dir() == tmp_path / "pg"


def test_root_keeps_its_data_in_var_lib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKIPLOCK_EMBEDDED_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_data_dir() == Path("/var/lib/skiplock/embedded-pg")


def test_a_user_keeps_it_in_the_xdg_data_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SKIPLOCK_EMBEDDED_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "skiplock" / "embedded-pg"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir() == Path.home() / ".local" / "share" / "skiplock" / "embedded-pg"
