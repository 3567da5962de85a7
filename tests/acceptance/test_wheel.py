"""An installed wheel migrates a database with the migrations it carries.

In the tree the Alembic environment sits beside the package (migrations/);
the wheel carries it inside (coordinator/migrations/). The wheel is built
from a copy of the sources, installed without its dependencies into a
scratch virtualenv that borrows this one's installed dependencies, and its
own `coordinator db upgrade` migrates an empty database.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from coordinator.db import migrate
from tests.processes import clean_environment

REPO = Path(__file__).resolve().parents[2]
# What the build reads: the project's metadata, the package and its migrations.
SOURCES = ("pyproject.toml", "README.md", "coordinator", "migrations")

pytestmark = pytest.mark.slow


def _run(args: list[str | Path], **options: object) -> str:
    result = subprocess.run(
        [str(arg) for arg in args], capture_output=True, text=True, timeout=300, **options
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="coordinator-test-wheel-") as directory:
        yield Path(directory)


def _build_wheel(scratch: Path) -> Path:
    source = scratch / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(REPO / name, source / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    dist = scratch / "dist"
    # No build isolation: setuptools comes from this virtualenv, not the network.
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    _run([*pip_wheel, "--wheel-dir", dist, source])
    (wheel,) = dist.glob("coordinator-*.whl")
    return wheel


def _install(wheel: Path, venv: Path) -> Path:
    """`wheel` installed in a new virtualenv at `venv`; its python."""
    _run([sys._base_executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    # Plain paths in a .pth file come after the scratch virtualenv's own
    # site-packages, and the .pth files in them do not run: this
    # virtualenv's editable install of the coordinator stays out.
    borrowed = "\n".join(site.getsitepackages())
    (Path(purelib.strip()) / "borrowed_dependencies.pth").write_text(borrowed + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel])
    return python


def _tables(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'coordinator'"
        ).fetchall()
    return {name for (name,) in rows}


def test_an_installed_wheel_migrates_an_empty_database(scratch: Path, empty_database: str) -> None:
    venv = scratch / "venv"
    python = _install(_build_wheel(scratch), venv)
    # Neither PYTHONPATH nor the working directory may lead to the source tree.
    environment = {k: v for k, v in clean_environment({}).items() if k != "PYTHONPATH"}
    where = _run(
        [python, "-c", "from coordinator.db import migrate as m; print(m.migrations_dir())"],
        cwd=scratch,
        env=environment,
    )
    assert Path(where.strip()).is_relative_to(venv / "lib")

    def coordinator(*args: str) -> str:
        command = [venv / "bin" / "coordinator", "--database-url", empty_database, *args]
        return _run(command, cwd=scratch, env=environment)

    heads = migrate.head_revisions()
    coordinator("db", "upgrade")
    assert migrate.current_revisions(empty_database) == heads
    assert {"messages", "message_history", "api_tokens", "alembic_version"} <= _tables(
        empty_database
    )

    coordinator("db", "downgrade", "-1")
    assert migrate.current_revisions(empty_database) not in ((), heads)
    coordinator("db", "upgrade")
    assert migrate.current_revisions(empty_database) == heads
