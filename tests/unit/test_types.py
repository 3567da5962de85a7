"""The package type-checks: mypy as pyproject.toml's [tool.mypy] configures it.

Strict on the vocabulary, the core and the query layer; the rest is checked
with the annotations it carries. An error mypy cannot be told about is
silenced on its own line with its code and the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `# type: ignore[code]  # why`
_JUSTIFIED = re.compile(r"# type: ignore\[[a-z-]+(, [a-z-]+)*\]  # \S")


def test_mypy_finds_no_errors() -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_ignored_error_says_why() -> None:
    unexplained = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("coordinator", "migrations")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line and not _JUSTIFIED.search(line)
    ]
    assert not unexplained, "\n".join(unexplained)
