"""HAProxy in front of a Patroni cluster, routing to the member Patroni calls the primary.

The recommended topology of docs/high-availability.md: the coordinator's URL
names the proxy, and the proxy sends each connection to the member whose
Patroni REST API answers `GET /primary` with 200. Patroni answers 503 there
on a member that lost the leader key, and nothing at all when it is dead,
so a primary whose Patroni died (its PostgreSQL still running and writable)
gets no connection, where a multi-host URL would still reach it.

`RECIPE` is the configuration the docs show, word for word (a test holds
them to it); `haproxy_in_front` runs it with the cluster's ports.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

from bench.ha_cluster import LOOPBACK, PatroniCluster
from bench.server import free_port

RECIPE = """\
global
    maxconn 1000

defaults
    mode tcp
    timeout connect 3s
    timeout client 30m
    timeout server 30m

listen coordinator_primary
    bind *:5000
    option httpchk GET /primary
    http-check expect status 200
    default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
    server pg1 pg1:5432 maxconn 100 check port 8008
    server pg2 pg2:5432 maxconn 100 check port 8008
    server pg3 pg3:5432 maxconn 100 check port 8008
"""

_SERVER = re.compile(r"^(    server (\w+) )\S+( .* check port )\d+$", re.MULTILINE)
START_SECONDS = 15.0
PRIMARIES_IN_A_ROW = 6


def configuration(cluster: PatroniCluster, port: int) -> str:
    """The recipe with this cluster's members (and their ports) and the proxy's own port."""
    members = {member.name: member for member in cluster.members}
    lines = [line for line in RECIPE.splitlines() if not _SERVER.match(line)]
    text = "\n".join(lines).replace("bind *:5000", f"bind {LOOPBACK}:{port}")
    template = next(_SERVER.finditer(RECIPE))
    servers = [
        f"{template.group(1).replace(template.group(2), name)}{LOOPBACK}:{member.pg_port}"
        f"{template.group(3)}{member.rest_port}"
        for name, member in members.items()
    ]
    return text + "\n" + "\n".join(servers) + "\n"


@contextmanager
def haproxy_in_front(cluster: PatroniCluster, *, program: str | None = None) -> Iterator[str]:
    """HAProxy running the recipe for `cluster`; yields a database URL through it.

    Stopped at the end, however the block ends.
    """
    found = program or shutil.which("haproxy") or "/usr/sbin/haproxy"
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="coordinator-haproxy-"))
    config = directory / "haproxy.cfg"
    config.write_text(configuration(cluster, port))
    log = directory / "haproxy.log"
    try:
        with log.open("wb") as output:
            # -db: in the foreground, so that this process is the one to stop.
            process = subprocess.Popen(
                [found, "-f", str(config), "-db"],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            url = cluster.url().split("@", 1)[0] + f"@{LOOPBACK}:{port}/{cluster.database}"
            _wait_routing(url, process, log)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _wait_routing(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until connections through the proxy reach the primary only.

    HAProxy starts with every server up and marks the standbys down after
    their first `fall` failed checks: until then it spreads connections over
    all members. Several primaries in a row mean the checks have run.
    """
    deadline = time.monotonic() + START_SECONDS
    in_a_row = 0
    while in_a_row < PRIMARIES_IN_A_ROW:
        if process.poll() is not None:
            raise RuntimeError(f"haproxy exited ({process.returncode}): {log.read_text()[-2000:]}")
        in_a_row = in_a_row + 1 if _reaches_a_primary(url) else 0
        if time.monotonic() > deadline:
            raise RuntimeError(f"haproxy routed to the primary only not within {START_SECONDS:g} s")
        time.sleep(0.1)


def _reaches_a_primary(url: str) -> bool:
    with suppress(psycopg.OperationalError), psycopg.connect(url, connect_timeout=2) as conn:
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return row is not None and not row[0]
    return False
