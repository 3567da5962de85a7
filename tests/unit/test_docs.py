"""The documentation stays true to the code it describes."""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.config import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_setting_is_in_the_configuration_page() -> None:
    page = (DOCS / "configuration.md").read_text()
    named = set(re.findall(r"`([a-z_]+)`", page))
    assert set(Settings.model_fields) - named == set()


def test_every_docs_page_is_linked_from_the_index() -> None:
    index = (DOCS / "index.md").read_text()
    pages = {path.name for path in DOCS.glob("*.md")} - {"index.md"}
    assert {page for page in pages if f"({page}" not in index} == set()


TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def test_every_test_the_docs_name_exists() -> None:
    # docs/guarantees.md proves each promise by naming tests; a renamed or
    # removed test must not leave a promise pointing at nothing.
    root = DOCS.parent
    named = [
        (page.name, path, test)
        for page in DOCS.glob("*.md")
        for path, test in TEST_REFERENCE.findall(page.read_text())
    ]
    assert len({page for page, _, _ in named}) >= 1 and len(named) >= 20
    missing = [
        (page, f"{path}::{test}")
        for page, path, test in named
        if not (root / path).is_file()
        or not re.search(rf"^(async )?def {test}\(", (root / path).read_text(), re.M)
    ]
    assert missing == []
