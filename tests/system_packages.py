"""Programs and files from Debian's packages that some tests need (Chromium, promtool, a jar).

A fresh machine does not have them, and the test command in the README is
all CI runs, so the tests install what they need themselves: `apt-get
install` when the program is missing and the tests run as root. When it
cannot be installed the test fails with a sentence saying why and what to
install by hand; it is never skipped, since a skip would hide that the
page or the rules are no longer checked.

One install at a time, machine-wide (a file lock), since apt refuses to run
twice at once and test sessions may run side by side.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

INSTALL_SECONDS = 600.0
LOCK = Path("/tmp/coordinator-tests-apt.lock")


def debian_program(program: str, package: str) -> str:
    """The path of `program`, installing Debian's `package` first if it is missing."""
    found = _installed(lambda: shutil.which(program), program, package)
    if not found:
        pytest.fail(f"Debian's {package} package was installed but {program} is not on PATH")
    return found


def debian_file(path: Path, package: str) -> Path:
    """`path` (a library, a jar), installing Debian's `package` first if it is missing."""
    found = _installed(lambda: str(path) if path.exists() else None, str(path), package)
    if not found:
        pytest.fail(f"Debian's {package} package was installed but {path} is not there")
    return path


def _installed(find: Callable[[], str | None], what: str, package: str) -> str | None:
    """What find() finds, after installing `package` if it found nothing at first."""
    found = find()
    if found:
        return found
    if not Path("/usr/bin/apt-get").exists() or os.geteuid() != 0:
        pytest.fail(
            f"{what} is needed and not installed: install Debian's {package} package "
            f"(apt-get install {package}), or run the tests as root so they install it"
        )
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find()  # another session may have installed it meanwhile
        if found:
            return found
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", package],
        ):
            try:
                done = subprocess.run(
                    command,
                    env=environment,
                    capture_output=True,
                    text=True,
                    timeout=INSTALL_SECONDS,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"`{' '.join(command)}` took longer than {INSTALL_SECONDS:.0f} s")
            if done.returncode != 0:
                pytest.fail(
                    f"`{' '.join(command)}` failed ({done.returncode}): "
                    f"{(done.stderr or done.stdout).strip()[-2000:]}"
                )
    return find()
