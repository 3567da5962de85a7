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
