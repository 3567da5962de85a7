"""`coordinator pipeline` run as users run it: a missing extra or database is one sentence.

Each test runs the installed command in a process of its own, so the
interpreter's imports are the real ones (or, for the missing extra, made to
fail), and what is checked is exactly what a terminal or a scheduler's log shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = str(Path(sys.executable).parent / "coordinator")
UNREACHABLE = "postgresql://x@127.0.0.1:1/db"
SUBCOMMANDS = ("report", "archive", "audit")

# Loaded by the interpreter at start (site imports `sitecustomize` from the
# path): every import of pyspark fails as it does where the extra is missing.
WITHOUT_PYSPARK = """
import importlib.abc
import sys


class NoPyspark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoPyspark())
"""


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    environment.update(env, NO_COLOR="1")
    return subprocess.run(
        args,
        cwd=tmp_path,  # outputs (defaults) and an embedded data directory stay in tmp
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_without_the_extra_the_hint_is_the_real_install_command(
    subcommand: str, tmp_path: Path
) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(WITHOUT_PYSPARK)

    done = run(
        [COMMAND, "--database-url", UNREACHABLE, "pipeline", subcommand],
        tmp_path,
        PYTHONPATH=str(shim),
    )

    # Named before the database is tried: the extra is the first thing to fix.
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "error: the pipeline needs the 'pipeline' extra (pyspark is missing): "
        "pip install 'coordinator[pipeline]'\n"
    )
    assert done.stdout == ""


@pytest.mark.parametrize(
    "command",
    [
        [COMMAND, "--database-url", UNREACHABLE, "pipeline"],
        [COMMAND, "pipeline", "--database-url", UNREACHABLE],
        [sys.executable, "-m", "coordinator.pipeline", "--database-url", UNREACHABLE],
    ],
    ids=["coordinator", "url-after-pipeline", "python-m"],
)
@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_an_unreachable_database_exits_5_with_one_sentence(
    command: list[str], subcommand: str, tmp_path: Path
) -> None:
    done = run([*command, subcommand], tmp_path)

    assert done.returncode == 5, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: cannot reach the database")
    assert "Connection refused" in line and "127.0.0.1" in line and "Traceback" not in line
    assert done.stdout == ""


def test_a_report_without_a_master_starts_no_jvm(database_url: str, tmp_path: Path) -> None:
    import psycopg

    from tests.pipeline.data import seed

    with psycopg.connect(database_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        seed(conn, 300, anchor=now, span_hours=6, groups=2, topics=2)
    # No Java where JAVA_HOME points: Spark cannot start, the report needs none.
    no_java = {"JAVA_HOME": str(tmp_path / "no-java")}
    report = [COMMAND, "--database-url", database_url, "pipeline", "report", "-o", "out"]

    done = run(report, tmp_path, **no_java)
    assert done.returncode == 0, done.stderr
    assert "300 half messages" in done.stdout
    assert "read 300 rows from PostgreSQL, in this process (no Spark)." in done.stdout
    assert (tmp_path / "out" / "report.html").is_file()

    # Spark's own launcher script complains first; ours is the last line.
    java_missing = "error: the job failed (PySparkRuntimeError: [JAVA_GATEWAY_EXITED] "
    forced = run([*report, "--engine", "spark"], tmp_path, **no_java)
    assert forced.returncode == 1
    assert forced.stderr.splitlines()[-1].startswith(java_missing), forced.stderr
    named = run(report, tmp_path, COORDINATOR_SPARK_MASTER="local[1]", **no_java)
    assert named.returncode == 1  # a master named: a Spark job, which needs Java
    assert named.stderr.splitlines()[-1].startswith(java_missing), named.stderr
