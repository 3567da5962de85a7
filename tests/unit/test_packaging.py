"""pyproject.toml lists every package of the tree, so the wheel carries them all.

The top-level migrations/ ships as coordinator.migrations through a
package-dir mapping, and with such a mapping setuptools discovers nothing
itself: a package left out of the list would be missing from the wheel only.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_under(directory: Path, name: str) -> set[str]:
    return {
        ".".join((name, *init.parent.relative_to(directory).parts))
        for init in directory.rglob("__init__.py")
    }


def test_every_package_of_the_tree_is_listed() -> None:
    setuptools = _setuptools()
    on_disk = _packages_under(REPO / "coordinator", "coordinator")
    for package, directory in setuptools["package-dir"].items():
        on_disk |= _packages_under(REPO / directory, package)
    assert set(setuptools["packages"]) == on_disk
