"""Child processes the soak starts: each in a session of its own, none outliving the soak.

Every child leads its own process group (so the terminal's Ctrl-C reaches
only the soak, which then stops them in order) and asks the kernel for a
signal when the soak dies, so even a SIGKILLed soak leaves nothing running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
# Looked up once here: the child between fork and exec should only call it.
_prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None


def _die_with_parent(signum: int) -> Callable[[], None]:
    def arm() -> None:
        # Runs in the child after fork, after any change of user (which
        # would clear it). The signal follows the death of the thread that
        # forked: the soak starts children from its main thread only.
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)

    return arm


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    on_parent_death: int = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session, stdout and stderr appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            user=user,
            start_new_session=True,
            preexec_fn=_die_with_parent(on_parent_death),
        )


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group and reap it."""
    signal_group(process, signal.SIGKILL)
    process.wait()


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


def stop(process: subprocess.Popen[bytes], *, grace_seconds: float = 10.0) -> None:
    """SIGTERM, then SIGKILL whatever is left after `grace_seconds`."""
    stop_all([process], grace_seconds=grace_seconds)


def stop_all(processes: Sequence[subprocess.Popen[bytes]], *, grace_seconds: float = 10.0) -> None:
    """SIGTERM every child at once, wait for all of them together, SIGKILL the rest."""
    for process in processes:
        signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.poll() is None:
            kill(process)
