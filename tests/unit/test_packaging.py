"""The package as people install it: the license its metadata declares, in a file; classifiers;
a changelog; extras that a user of the wheel can use (the benchmarks' peers, for a ``bench/``
that the wheel does not ship, are installed from ``bench/requirements.txt`` by the dev setup)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BENCH_ONLY = {"pgqueuer", "procrastinate", "py-spy"}  # peers and tools of bench/ alone


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


def test_the_declared_license_is_in_the_repository() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n") or "Apache License" in text[:200]
    assert "Version 2.0, January 2004" in text[:300]
    assert "END OF TERMS AND CONDITIONS" in text


def test_classifiers_say_what_the_package_is() -> None:
    classifiers = set(PROJECT["classifiers"])
    minimum = re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"])
    assert minimum is not None
    assert {
        "Typing :: Typed",
        "Programming Language :: Python :: 3 :: Only",
        f"Programming Language :: Python :: 3.{minimum.group(1)}",
        "Topic :: Database",
    } <= classifiers, classifiers
    assert any(c.startswith("Framework :: ") for c in classifiers), classifiers
    assert not any(c.startswith("License :: ") for c in classifiers)  # the SPDX field says it
    assert (ROOT / "src" / "skiplock" / "py.typed").exists()


def test_a_changelog_names_the_current_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(PROJECT['version'])}\b", changelog, re.M), changelog[:300]


def test_no_extra_installs_what_only_the_repositorys_benchmarks_use() -> None:
    extras = PROJECT["optional-dependencies"]
    assert "bench" not in extras
    for extra, requirements in extras.items():
        assert not names(requirements) & BENCH_ONLY, (extra, requirements)
    lines = (ROOT / "bench" / "requirements.txt").read_text().splitlines()
    assert names([x for x in lines if x.strip() and not x.startswith("#")]) >= BENCH_ONLY
    # The README's test command and CI install them that way, and no longer name the extra.
    for path in ("README.md", ".ci/run", "bench/README.md"):
        text = (ROOT / path).read_text()
        assert "bench/requirements.txt" in text, path
        assert not re.search(r"\[[a-z,]*bench[a-z,]*\]", text), path
