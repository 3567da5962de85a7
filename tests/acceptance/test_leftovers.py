"""The session's check for processes the tests left running (tests/leftovers.py) works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

LEAVES_ONE = """
import subprocess

def test_starts_a_process_and_forgets_it():
    subprocess.Popen(["sleep", "300"])
"""

CLEANS_UP = """
import subprocess

def test_starts_a_process_and_stops_it():
    process = subprocess.Popen(["sleep", "300"])
    process.terminate()
    process.wait()
"""


def _session(tmp_path: Path, test: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(test)
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.leftovers", "-q", "test_inner.py"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_session_whose_test_left_a_process_running_fails_and_stops_it(
    tmp_path: Path,
) -> None:
    run = _session(tmp_path, LEAVES_ONE)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout
    assert "1 process(es) started by the tests outlived them (now stopped):" in run.stdout
    (pid,) = re.findall(r"^  (\d+) sleep 300$", run.stdout, flags=re.MULTILINE)
    assert not psutil.pid_exists(int(pid)) or (
        psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    )


def test_a_session_whose_tests_clean_up_passes(tmp_path: Path) -> None:
    run = _session(tmp_path, CLEANS_UP)
    assert run.returncode == pytest.ExitCode.OK, run.stdout
    assert "outlived" not in run.stdout
