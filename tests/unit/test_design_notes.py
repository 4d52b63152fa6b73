"""docs/design.md keeps the measurements behind decisions; the code links to a section as
``docs/design.md, "Its title"``.  Every such link must name a section that is there, and each
section's title is unique, so that a link cannot become ambiguous."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
LINK = re.compile(r'docs/design\.md, "([^"]+)"')


def sections() -> list[str]:
    return re.findall(r"^## (.+?)\s*$", DESIGN.read_text(), re.M)


def links() -> list[tuple[str, str]]:
    """(file, title) of each link in the source, the benchmarks and the docs; a title may wrap
    onto the next comment or docstring line."""
    found = []
    for folder in ("src", "bench", "tools", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".md", ".sql") or path == DESIGN:
                continue
            text = re.sub(r"\s*\n\s*(?:#|--)?\s*", " ", path.read_text())
            found += [(str(path.relative_to(ROOT)), t) for t in LINK.findall(text)]
    return found


def test_the_design_notes_have_a_title_and_unique_sections() -> None:
    assert DESIGN.read_text().startswith("# Design notes\n")
    titles = sections()
    assert titles and len(titles) == len(set(titles)), titles


def test_every_link_to_the_design_notes_names_a_section() -> None:
    found = links()
    assert len(found) >= 6  # the ones made when the notes moved here
    titles = set(sections())
    broken = [f"{path}: {title!r}" for path, title in found if title not in titles]
    assert not broken, f"links to sections docs/design.md does not have: {broken}"
