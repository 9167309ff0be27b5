"""The project's documents stand on their own (a clone has no ../shared): every relative link and anchor
in the README and docs/ resolves, and none cites a document outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    found = set()
    for line in path.read_text().splitlines():
        heading = re.match(r"^#+ (.*)", line)
        if heading:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(document):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", document.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_cites_one_outside_the_repository(document):
    text = document.read_text()
    assert "../shared" not in text and "DESIGN.md" not in text and "DESIGN §" not in text


def test_the_views_page_runs_as_written():
    """docs/VIEWS.md's Python blocks, in order, in one namespace, as a reader would paste them: every example
    on the page (the library view and its test, the suite's rules, the alerts, the logical-time session, the
    CDC feed, the side by side) is code that works. The other projection libraries' outlines are `text`."""
    text = (ROOT / "docs" / "VIEWS.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert len(blocks) >= 7
    namespace: dict = {"__name__": "docs_views_page"}
    for number, block in enumerate(blocks, 1):
        # dont_inherit: the page is read as a reader runs it, without this file's `from __future__` imports
        exec(compile(block, f"docs/VIEWS.md python block {number}", "exec", dont_inherit=True), namespace)
