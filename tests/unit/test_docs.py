"""The documentation stays true to the code it describes."""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.config import Settings
from tests import layout

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


def test_every_module_says_what_it_is_in_a_docstring() -> None:
    # The development page's layout is made of these summaries.
    assert [str(path) for path in layout.modules() if layout.summary(path) is None] == []


def test_the_development_page_lists_the_modules_as_their_docstrings_say() -> None:
    page = layout.PAGE.read_text()
    assert layout.with_layout(page, layout.layout()) == page, (
        f"the layout in docs/development.md differs from the modules' docstrings: "
        f"rewrite it with `{layout.COMMAND}`"
    )


def test_the_layout_generator_replaces_only_its_part(tmp_path: Path) -> None:
    package = tmp_path / "coordinator"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "core" / "__init__.py").write_text('"""The core:\nits services."""\n')
    (package / "core" / "rounds.py").write_text('"""Rounds, batch\nby batch.\n\nMore."""\n')
    page = f"# Page\n\nprose\n\n{layout.BEGIN}\n\nstale\n\n{layout.END}\n\nafter\n"
    assert layout.with_layout(page, layout.layout(package)) == (
        f"# Page\n\nprose\n\n{layout.BEGIN}\n\n"
        "### `coordinator/`\n\nThe package.\n\n"
        "### `coordinator/core/`\n\nThe core: its services.\n\n"
        "- `rounds.py`: Rounds, batch by batch.\n\n"
        f"{layout.END}\n\nafter\n"
    )
