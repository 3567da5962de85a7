"""A real Patroni cluster (etcd and three PostgreSQL members) on loopback, to break on purpose.

The high-availability tests and `python -m bench.failover` need a primary
that really dies, hangs or loses its standbys, and a Patroni that really
fails over, so this starts the real thing: one etcd 3.4 (v2 API, which
Patroni's `etcd:` section speaks; its `etcd3:` section in Patroni 3.0.2 lets
a resumed old primary overwrite the new leader's key) and one Patroni per
member, each running pgserver's PostgreSQL 16. Everything listens on
127.0.0.1 only and lives in one temporary directory, removed at the end.

Postgres refuses to run as root, so Patroni (and the postgres it starts)
runs as the unprivileged system user `pgserver`, the one pgserver itself
uses; etcd runs as the caller. etcd, Patroni and each postmaster carry an
environment mark of their cluster (Patroni passes its environment on to
postgres; postgres's other processes overwrite theirs with their titles,
but work in the data directory), and when the block ends, however it
ends, Patroni is stopped (SIGTERM: it stops its postgres), then any
postmaster left, then etcd, and whatever is left that carries the mark or
works in the cluster's directory is killed. Every wait is bounded and fails
with the tail of the logs.

Clients: `url()` names every member with target_session_attrs=read-write
(libpq finds the primary). Give clients a `connect_timeout`: a frozen member
accepts TCP connections (the kernel does) and never answers.

Faults, as methods of the cluster: `kill_node` (a machine dying: Patroni and
all of its postgres SIGKILLed at once), `kill_postmaster`, `kill_patroni`,
`freeze`/`thaw` (SIGSTOP/SIGCONT of the whole member, a hung or partitioned
node), `hold_replication`/`release_replication` (the primary's walsenders
stopped: commits wait in SyncRep) and `cancel_sync_waits`. `start_member`
brings a stopped member back; `wait_healthy` waits until the cluster is
whole again, between scenarios.

Why maximum_lag_on_failover is huge: a member promotes itself only when
its WAL position is within that many bytes of the position the leader last
wrote to etcd (every loop_wait). In strict synchronous mode only the
synchronous standby may be promoted, and it has received every commit that
was acknowledged, so what it lacks was never acknowledged: commits whose
synchronous wait was cancelled (committed locally, the client got success
and a WARNING) or that still waited in SyncRep. Such a gap must not stop the
failover. Seen here, replication held, one commit's wait cancelled, then
the primary killed: with maximum_lag_on_failover 0 (a 184-byte gap) and
with Patroni's default 1 MiB (a cancelled 20000-row insert, a 9 MB gap) the
standby logs "My wal position exceeds maximum replication lag" every loop
and the cluster stays without a leader for good; with 2**40 it is promoted
as after any other kill, without the cancelled rows, and the old primary
rejoins with pg_rewind, which removes them there too.

What Patroni (3.0.2) does, and how long it takes here (2 cores shared with
other test sessions; kills of the primary, times from the fault):
- Bootstrap to a database on a cluster with a synchronous standby: 10-14 s
  (21 s once, under a load average of 12). One member wins the race to
  initdb, the others copy it with pg_basebackup.
- kill_node: the sync standby holds the leader key after 9-10 s (the
  leader key's ttl, 10 s, plus up to a loop) and commits writes after
  9-11 s. The old member, started again, rejoins (pg_rewind when its WAL
  went further than the new primary's) in 4-7 s.
- kill_postmaster: no failover. Patroni keeps the leader key, runs crash
  recovery in single-user mode, starts postgres as a standby and promotes
  it again (a new timeline): the same member commits again after 3-4 s,
  the standbys follow its new timeline within 3 s more.
- kill_patroni: the leader key expires, the sync standby is promoted
  (10 s), while the old postgres still runs as a primary accepting
  connections: a multi-host URL with target_session_attrs=read-write may
  well pick it (it is first in the list), and a commit there hangs in
  SyncRep, since no standby follows it any more. start_member: the new
  Patroni finds the running postgres, sees another leader, demotes it at
  once (immediate shutdown: the hanging client sees its connection close),
  rewinds it and follows the new primary: healthy after 8-12 s.
- freeze (20 s here): the sync standby is promoted after 10-12 s. After
  thaw, the old postgres is still a writable primary until its Patroni's
  next loop (0.5-2.5 s: commits there hang in SyncRep); Patroni then finds
  its leader key gone ("Demoting self (immediate-nolock)"), restarts it as
  a standby of the new leader (a standby 2-3 s after thaw) and rewinds it
  if it diverged: healthy 7-9 s after thaw. The new leader keeps its key
  (with the v2 etcd API; see REFERENCE on Patroni 3.0.2's etcd3).
- hold_replication: commits wait in SyncRep (wait_event 'SyncRep') until
  release_replication; cancel_sync_waits makes them commit locally with a
  WARNING. Then kill_node: promoted after 9-11 s without those commits.
- Stopping: 6-7 s (11 s under load): Patroni stops postgres gracefully, and
  the synchronous standby waits up to 2 * loop_wait for the leader to
  release it first.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
import psutil
import psycopg
from psycopg import sql

from bench.server import free_port

LOOPBACK = "127.0.0.1"
SCOPE = "coordinator-ha"
# pgserver's own unprivileged user (pgserver/postgres_server.py) when run as root.
SYSTEM_USER = "pgserver"
SUPERUSER = "postgres"
# util-linux's, on every Debian: runs a program under other user and group ids.
SETPRIV = "/usr/bin/setpriv"
REPLICATION_USER = "replicator"
# Every process of one cluster carries this variable (its value is the
# cluster's id), so that nothing it started can be missed when it stops.
MARK = "BENCH_HA_CLUSTER"

# Patroni's dynamic configuration: short loops, so that a failover takes
# about ttl + a loop or two rather than Patroni's default ~30 s.
TTL = 10
LOOP_WAIT = 2
RETRY_TIMEOUT = 3
# See the module docstring: in strict synchronous mode the gap between the
# synchronous standby and the leader's last reported position is made of
# unacknowledged commits only, so it must never block a promotion.
MAXIMUM_LAG_ON_FAILOVER = 1 << 40
# ~100 client connections, plus Patroni's own, replication and the probes here.
MAX_CONNECTIONS = 200

# Generous bounds: the steps take seconds (module docstring), but the
# machine may be busy with other test sessions.
ETCD_SECONDS = 30.0
STARTUP_SECONDS = 120.0
HEALTHY_SECONDS = 90.0
FAILOVER_SECONDS = 60.0
PATRONI_STOP_SECONDS = 30.0
PROCESS_GONE_SECONDS = 10.0
# A frozen member still accepts TCP connections: its REST API then answers
# nothing, and the next member is asked after this long.
HTTP_SECONDS = 1.0
# A probe (a write, a query) given up after this long, so that a member that
# hangs cannot hang the caller.
QUERY_SECONDS = 5.0
CONNECT_SECONDS = 2
POLL_SECONDS = 0.2
LOG_LINES = 40

T = TypeVar("T")
# A walsender's process title; Patroni sets cluster_name (the scope), which
# postgres puts in the titles of its processes.
_WALSENDER = re.compile(r"postgres: (?:[^:]*: )?walsender ")
_QUIET = " INFO: no action. "


class HaClusterError(RuntimeError):
    """The cluster did not reach a state in time, or a process of it failed."""


def postgres_bin_dir() -> Path:
    """pgserver's PostgreSQL binaries (initdb, pg_ctl, pg_basebackup, pg_rewind, postgres).

    Found without importing pgserver: its import creates runtime directories and warns.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise HaClusterError("pgserver is not installed: its PostgreSQL binaries are needed")
    return Path(spec.origin).parent / "pginstall" / "bin"


@dataclass(frozen=True)
class Member:
    """One Patroni member: its ports, and its directory (config, log, data)."""

    name: str
    pg_port: int
    rest_port: int
    data_dir: Path

    @property
    def directory(self) -> Path:
        return self.data_dir.parent

    @property
    def config_file(self) -> Path:
        return self.directory / "patroni.yml"

    @property
    def log_file(self) -> Path:
        """Patroni's output and its postgres's (postgres inherits Patroni's stderr)."""
        return self.directory / "member.log"

    @property
    def rest_url(self) -> str:
        return f"http://{LOOPBACK}:{self.rest_port}"

    def patroni_pid(self) -> int | None:
        """The running Patroni of this member (found by its config file on its command line)."""
        for process in psutil.process_iter(["cmdline", "status"]):
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if str(self.config_file) in (process.info["cmdline"] or []):
                return process.pid
        return None

    def postmaster_pid(self) -> int | None:
        """The running postmaster of this member, from postmaster.pid (None when none runs).

        Checked against the process itself, since the file outlives a killed
        postmaster and its pid may have been given to another process since.
        """
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
            process = psutil.Process(pid)
            if (
                process.name() == "postgres"
                and process.status() != psutil.STATUS_ZOMBIE
                and Path(process.cwd()) == self.data_dir.resolve()
            ):
                return pid
        except (OSError, ValueError, psutil.Error):
            pass
        return None

    def postgres_pids(self) -> list[int]:
        """The postmaster first, then its children (backends, walsenders, background workers)."""
        postmaster = self.postmaster_pid()
        if postmaster is None:
            return []
        try:
            children = psutil.Process(postmaster).children(recursive=True)
        except psutil.Error:
            return []
        return [postmaster, *(child.pid for child in children)]

    def walsender_pids(self) -> list[int]:
        """This member's walsenders: one per standby streaming from it."""
        found = []
        for pid in self.postgres_pids()[1:]:
            with suppress(psutil.Error, IndexError):
                if _WALSENDER.match(psutil.Process(pid).cmdline()[0]):
                    found.append(pid)
        return found


class PatroniCluster:
    """A running cluster (see `patroni_cluster`): its members, URLs, state and faults."""

    def __init__(
        self, *, patroni: str, etcd: str, members: int, database: str, directory: Path
    ) -> None:
        self.database = database
        self.directory = directory
        self.password = secrets.token_hex(12)
        self._replication_password = secrets.token_hex(12)
        self._patroni_program = patroni
        self._etcd_program = etcd
        self._mark = uuid.uuid4().hex
        self._etcd_port = free_port()
        self._etcd_peer_port = free_port()
        self.etcd_url = f"http://{LOOPBACK}:{self._etcd_port}"
        self.members = [
            Member(
                name=f"pg{number}",
                pg_port=free_port(),
                rest_port=free_port(),
                data_dir=directory / f"pg{number}" / "data",
            )
            for number in range(1, members + 1)
        ]
        self._etcd: subprocess.Popen[bytes] | None = None
        self._patroni: dict[str, subprocess.Popen[bytes]] = {}
        self._started: list[subprocess.Popen[bytes]] = []  # every one, to reap them all
        # Members whose Patroni this harness stopped (kill_node, kill_patroni)
        # and not started again, and the pids each freeze stopped.
        self._down: set[str] = set()
        self._frozen: dict[str, list[int]] = {}
        self._held: dict[str, list[int]] = {}

    # --- addresses -------------------------------------------------------------------

    def member(self, name: str) -> Member:
        for member in self.members:
            if member.name == name:
                return member
        raise KeyError(name)

    def url(
        self,
        dbname: str | None = None,
        *,
        target_session_attrs: str = "read-write",
        form: Literal["hosts", "query"] = "hosts",
    ) -> str:
        """A libpq URL naming every member; libpq picks one by target_session_attrs.

        form="hosts" lists host:port pairs in the authority; form="query"
        puts them in host= and port= parameters, the form SQLAlchemy's
        make_url accepts. Add a connect_timeout: a frozen member never answers.
        """
        credentials = f"{SUPERUSER}:{quote(self.password, safe='')}"
        name = quote(dbname or self.database, safe="")
        if form == "hosts":
            hosts = ",".join(f"{LOOPBACK}:{member.pg_port}" for member in self.members)
            return (
                f"postgresql://{credentials}@{hosts}/{name}"
                f"?target_session_attrs={target_session_attrs}"
            )
        hosts = ",".join(LOOPBACK for _ in self.members)
        ports = ",".join(str(member.pg_port) for member in self.members)
        return (
            f"postgresql://{credentials}@/{name}?host={hosts}&port={ports}"
            f"&target_session_attrs={target_session_attrs}"
        )

    def member_url(self, member: Member, dbname: str | None = None) -> str:
        """A URL of this member alone, whatever its role."""
        credentials = f"{SUPERUSER}:{quote(self.password, safe='')}"
        name = quote(dbname or self.database, safe="")
        return f"postgresql://{credentials}@{LOOPBACK}:{member.pg_port}/{name}"

    # --- state, from Patroni's REST API ----------------------------------------------

    def status(self) -> dict[str, Any] | None:
        """Patroni's `GET /cluster` (read from etcd) from the first member that answers.

        Members this harness stopped or froze are not asked. None when no
        member answers.
        """
        for member in self._answering():
            found = _get_json(f"{member.rest_url}/cluster")
            if isinstance(found, dict) and "members" in found:
                return found
        return None

    def primary(self) -> Member | None:
        """The member holding the leader key (None when there is none, or nobody answers)."""
        return next(iter(self._with_role("leader")), None)

    def sync_standby(self) -> Member | None:
        """The synchronous standby named in etcd: the only member allowed to be promoted."""
        return next(iter(self._with_role("sync_standby")), None)

    def replicas(self) -> list[Member]:
        """The asynchronous standbys (role `replica`), not the synchronous one."""
        return self._with_role("replica")

    def _with_role(self, role: str) -> list[Member]:
        state = self.status()
        if state is None:
            return []
        return [self.member(m["name"]) for m in state["members"] if m.get("role") == role]

    def _answering(self) -> list[Member]:
        return [m for m in self.members if m.name not in self._down and m.name not in self._frozen]

    # --- waits -------------------------------------------------------------------------

    def wait_for_new_primary(self, old: Member, timeout: float = FAILOVER_SECONDS) -> Member:
        """Until a member other than `old` holds the leader key and commits a write."""

        def check() -> tuple[Member | None, str]:
            leader = self.primary()
            if leader is None:
                return None, "no leader"
            if leader == old:
                return None, f"{old.name} is still the leader"
            refused = self._write_refused(leader)
            if refused:
                return None, f"{leader.name} leads but does not commit a write: {refused}"
            return leader, ""

        return self._wait(f"a new primary instead of {old.name}", timeout, check)

    def wait_healthy(self, timeout: float = HEALTHY_SECONDS) -> Member:
        """Until every member runs, a synchronous standby streams, nobody lags and writes commit.

        Returns the primary. Every member must be running: start the ones
        that were stopped first (start_member, thaw). Call it with no load
        running: "no lag" compares positions Patroni samples every loop_wait.
        """
        stopped = sorted(self._down | set(self._frozen))
        if stopped:
            raise HaClusterError(
                f"wait_healthy needs every member: {', '.join(stopped)} stopped or frozen "
                "by this harness (start_member / thaw first)"
            )
        return self._wait("a healthy cluster", timeout, self._health)

    def _health(self) -> tuple[Member | None, str]:
        state = self.status()
        if state is None:
            return None, "no Patroni answered GET /cluster"
        listed = {m["name"]: m for m in state["members"]}
        leaders = [m for m in listed.values() if m.get("role") == "leader"]
        if not leaders:
            return None, f"no leader; members: {_describe(listed)}"
        leader = self.member(leaders[0]["name"])
        missing = [m.name for m in self.members if m.name not in listed]
        if missing:
            return None, f"not registered: {', '.join(missing)}; members: {_describe(listed)}"
        unwell = [
            name
            for name, m in listed.items()
            if m.get("state") != "running"
            or m.get("timeline") != leaders[0].get("timeline")
            or (name != leader.name and m.get("lag") != 0)
        ]
        if unwell:
            return None, f"not running, or lagging: {', '.join(unwell)}; {_describe(listed)}"
        sync = [name for name, m in listed.items() if m.get("role") == "sync_standby"]
        if not sync:
            return None, f"no synchronous standby; members: {_describe(listed)}"
        patroni = _get_json(f"{leader.rest_url}/patroni")
        replication = patroni.get("replication", []) if isinstance(patroni, dict) else []
        streaming = {r["application_name"]: r for r in replication if r.get("state") == "streaming"}
        not_streaming = [n for n in listed if n != leader.name and n not in streaming]
        if not_streaming:
            return None, f"not streaming from {leader.name}: {', '.join(not_streaming)}"
        if streaming[sync[0]].get("sync_state") != "sync":
            return None, f"{sync[0]} is named synchronous but is not in sync yet"
        refused = self._write_refused(leader)
        if refused:
            return None, f"{leader.name} does not commit a write: {refused}"
        return leader, ""

    def _wait(self, what: str, timeout: float, check: Callable[[], tuple[T | None, str]]) -> T:
        deadline = time.monotonic() + timeout
        seen = "nothing yet"
        while True:
            self._check_processes()
            found, why = check()
            if found is not None:
                return found
            seen = why
            if time.monotonic() > deadline:
                raise HaClusterError(
                    f"timed out after {timeout:.0f} s waiting for {what}; last seen: {seen}\n"
                    f"{self.logs()}"
                )
            time.sleep(POLL_SECONDS)

    def _check_processes(self) -> None:
        """Fail at once, with its log, when a process exits that this harness did not stop."""
        if self._etcd is not None and self._etcd.poll() is not None:
            raise HaClusterError(f"etcd exited ({self._etcd.returncode})\n{self.logs()}")
        for name, process in self._patroni.items():
            if name not in self._down and process.poll() is not None:
                member = self.member(name)
                raise HaClusterError(
                    f"Patroni of {name} exited ({process.returncode})\n"
                    f"{_tail(member.log_file, LOG_LINES, member.name)}"
                )

    # --- SQL on one member, bounded in time -------------------------------------------

    def execute(
        self,
        member: Member,
        query: str,
        params: Sequence[Any] = (),
        *,
        dbname: str | None = None,
        timeout: float = QUERY_SECONDS,
    ) -> list[tuple[Any, ...]]:
        """Run `query` (autocommit) on this member, in `dbname` (default: the cluster's
        database); its rows. Bounded by `timeout`.

        Neither statement_timeout nor a cancel can bound a commit's
        synchronous wait without committing it locally, and nothing bounds a
        query on a frozen server: on time-out the connection's socket is
        shut down under the client, which then raises psycopg.OperationalError.
        """
        with self._connect(member, dbname) as conn, _socket_deadline(conn, timeout):
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def _connect(self, member: Member, dbname: str | None) -> psycopg.Connection[Any]:
        # libpq's smallest connect_timeout: a server that does not answer in
        # that long (a frozen one) is not worth waiting for.
        return psycopg.connect(
            self.member_url(member, dbname), autocommit=True, connect_timeout=CONNECT_SECONDS
        )

    def _write_refused(self, member: Member) -> str | None:
        """Why a write does not commit on this member now (None when it does).

        txid_current() gives the transaction an id, so its commit is logged
        and waits for the synchronous standby, as a client's write would.
        """
        try:
            with self._connect(member, "postgres") as conn, _socket_deadline(conn, QUERY_SECONDS):
                if conn.execute("SELECT pg_is_in_recovery()").fetchone() != (False,):
                    return "in recovery"
                conn.execute("SELECT txid_current()")
        except psycopg.Error as error:
            return f"{type(error).__name__}: {str(error).strip()[:200]}"
        return None

    # --- faults ------------------------------------------------------------------------

    def kill_node(self, member: Member) -> None:
        """SIGKILL Patroni and all of the member's postgres at once, like a machine dying.

        Everything is stopped (SIGSTOP) before anything is killed, so that no
        process acts on another's death (a walsender sending more WAL, Patroni
        restarting postgres).
        """
        patroni = self._live_patroni(member)
        self._signal_group(patroni, signal.SIGSTOP)
        pids = self._stop_postgres_tree(member)
        self._signal_group(patroni, signal.SIGKILL)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        self._reap(patroni)
        self._down.add(member.name)
        # Their pids are free for the system to give to other processes now.
        self._frozen.pop(member.name, None)
        self._held.pop(member.name, None)
        _wait_gone(pids, PROCESS_GONE_SECONDS)

    def kill_postmaster(self, member: Member) -> None:
        """SIGKILL the postmaster only: its children notice and exit; Patroni notices and acts."""
        postmaster = member.postmaster_pid()
        if postmaster is None:
            raise HaClusterError(f"{member.name} has no running postmaster")
        _signal(postmaster, signal.SIGKILL)
        self._held.pop(member.name, None)
        _wait_gone([postmaster], PROCESS_GONE_SECONDS)

    def kill_patroni(self, member: Member) -> None:
        """SIGKILL Patroni only: its postgres keeps running (still a writable primary if it was)."""
        patroni = self._live_patroni(member)
        self._signal_group(patroni, signal.SIGKILL)
        self._reap(patroni)
        self._down.add(member.name)

    def start_member(self, member: Member) -> None:
        """Start Patroni again for a member stopped by kill_node or kill_patroni.

        It rejoins as a replica (pg_rewind when its timeline diverged); a
        postmaster still running (after kill_patroni) is taken over. Returns
        at once: wait_healthy waits for the rejoin.
        """
        if member.name in self._frozen:
            raise HaClusterError(f"{member.name} is frozen: thaw it instead")
        process = self._patroni.get(member.name)
        if member.name not in self._down and process is not None and process.poll() is None:
            raise HaClusterError(f"Patroni of {member.name} is running: stop it first")
        self._start_patroni(member)
        self._down.discard(member.name)

    def freeze(self, member: Member) -> None:
        """SIGSTOP Patroni and all of the member's postgres: a node that hangs or is cut off.

        Its TCP ports still accept connections (the kernel does) and nothing answers.
        """
        if member.name in self._frozen:
            raise HaClusterError(f"{member.name} is frozen already")
        patroni = self._live_patroni(member)
        self._signal_group(patroni, signal.SIGSTOP)
        self._frozen[member.name] = self._stop_postgres_tree(member)

    def thaw(self, member: Member) -> None:
        """SIGCONT what freeze stopped: postgres first, then Patroni, which then finds out
        whether it still leads."""
        pids = self._frozen.pop(member.name, None)
        if pids is None:
            raise HaClusterError(f"{member.name} is not frozen")
        for pid in pids:
            _signal(pid, signal.SIGCONT)
        self._signal_group(self._patroni[member.name], signal.SIGCONT)

    def hold_replication(self, primary: Member) -> list[int]:
        """SIGSTOP the primary's walsenders: its commits then wait in SyncRep. Their pids.

        A standby gives up on a silent walsender after wal_receiver_timeout
        (60 s) and connects again, to a walsender that is not held.
        """
        pids = primary.walsender_pids()
        if not pids:
            raise HaClusterError(f"{primary.name} has no walsender to hold")
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        self._held.setdefault(primary.name, []).extend(pids)
        return pids

    def release_replication(self, primary: Member) -> None:
        """SIGCONT the walsenders hold_replication stopped (those still alive)."""
        for pid in self._held.pop(primary.name, []):
            _signal(pid, signal.SIGCONT)

    def cancel_sync_waits(self, member: Member) -> int:
        """Cancel every commit waiting for the synchronous standby on `member`; how many.

        A cancelled wait does not undo the commit: it stays committed
        locally and the client gets success with a WARNING, although no
        standby has it.
        """
        rows = self.execute(
            member,
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
            dbname="postgres",
        )
        return sum(1 for (cancelled,) in rows if cancelled)

    def _live_patroni(self, member: Member) -> subprocess.Popen[bytes]:
        process = self._patroni.get(member.name)
        if process is None or member.name in self._down or process.poll() is not None:
            raise HaClusterError(f"Patroni of {member.name} is not running")
        return process

    def _stop_postgres_tree(self, member: Member) -> list[int]:
        """SIGSTOP the postmaster, then its children (a stopped postmaster forks no more)."""
        postmaster = member.postmaster_pid()
        if postmaster is None:
            return []
        _signal(postmaster, signal.SIGSTOP)
        pids = member.postgres_pids() or [postmaster]
        for pid in pids[1:]:
            _signal(pid, signal.SIGSTOP)
        return pids

    # --- logs --------------------------------------------------------------------------

    def logs(self, lines: int = LOG_LINES) -> str:
        """The last lines of etcd's log and of every member's (Patroni and postgres)."""
        parts = [_tail(self.directory / "etcd.log", lines // 2, "etcd")]
        parts += [_tail(member.log_file, lines, member.name) for member in self.members]
        return "\n".join(parts)

    # --- starting and stopping ----------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        """The caller's environment with the cluster's mark; nothing that steers etcd,
        Patroni (PATRONI_* overrides its config), libpq or Debian's Python otherwise."""
        dropped = ("PATRONI_", "ETCD", "PG", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        environment = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        environment[MARK] = self._mark
        return environment

    def _start(self) -> None:
        user = _system_user()
        if user is not None:
            os.chown(self.directory, user.pw_uid, user.pw_gid)
        bin_dir = postgres_bin_dir()
        etcd_dir = self.directory / "etcd"
        etcd_dir.mkdir(mode=0o700)
        client = f"http://{LOOPBACK}:{self._etcd_port}"
        peer = f"http://{LOOPBACK}:{self._etcd_peer_port}"
        self._etcd = self._launch(
            [
                self._etcd_program,
                "--name=etcd",
                f"--data-dir={etcd_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=etcd={peer}",
                "--initial-cluster-state=new",
                "--enable-v2=true",  # Patroni's etcd: section speaks the v2 API
                "--logger=zap",
                "--log-level=warn",
            ],
            self.directory / "etcd.log",
            user=None,
        )
        self._wait("etcd answering its v2 API", ETCD_SECONDS, self._etcd_ready)
        for member in self.members:
            member.directory.mkdir(mode=0o700)
            member.config_file.write_text(json.dumps(self._config(member, bin_dir), indent=2))
            if user is not None:
                os.chown(member.directory, user.pw_uid, user.pw_gid)
                os.chown(member.config_file, user.pw_uid, user.pw_gid)
        # All at once: one wins the race to initialize, the others wait for it
        # and copy it with pg_basebackup.
        for member in self.members:
            self._start_patroni(member)
        primary = self._wait("a bootstrapped cluster", STARTUP_SECONDS, self._health)
        self._create_database(primary)

    def _etcd_ready(self) -> tuple[bool | None, str]:
        found = _get_json(f"{self.etcd_url}/v2/keys/")
        return (True, "") if isinstance(found, dict) else (None, "no answer")

    def _create_database(self, primary: Member) -> None:
        exists = self.execute(
            primary,
            "SELECT 1 FROM pg_database WHERE datname = %s",
            [self.database],
            dbname="postgres",
        )
        if not exists:
            statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database))
            with (
                self._connect(primary, "postgres") as conn,
                _socket_deadline(conn, HEALTHY_SECONDS),
            ):
                conn.execute(statement)

    def _config(self, member: Member, bin_dir: Path) -> dict[str, Any]:
        """Patroni's configuration of one member (YAML is a superset of JSON)."""
        return {
            "scope": SCOPE,
            "name": member.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"{LOOPBACK}:{member.rest_port}",
                "connect_address": f"{LOOPBACK}:{member.rest_port}",
            },
            "etcd": {"host": f"{LOOPBACK}:{self._etcd_port}", "protocol": "http"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": MAXIMUM_LAG_ON_FAILOVER,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",  # pg_rewind needs it (no data checksums)
                            "synchronous_commit": "on",
                            "wal_retrieve_retry_interval": "1s",
                            "max_connections": MAX_CONNECTIONS,
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            # A rejoining member finds the WAL since it left.
                            "wal_keep_size": "256MB",
                        },
                    },
                },
                # No fsync of the new cluster: the faults here kill processes, never
                # the machine, so the page cache survives them; it saves seconds.
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"{LOOPBACK}:{member.pg_port}",
                "connect_address": f"{LOOPBACK}:{member.pg_port}",
                "data_dir": str(member.data_dir),
                "bin_dir": str(bin_dir),
                "pgpass": str(member.directory / "pgpass"),
                "authentication": {
                    "superuser": {"username": SUPERUSER, "password": self.password},
                    "replication": {
                        "username": REPLICATION_USER,
                        "password": self._replication_password,
                    },
                },
                "parameters": {"unix_socket_directories": str(member.directory)},
                "pg_hba": [
                    "local all all trust",
                    "local replication all trust",
                    f"host replication {REPLICATION_USER} {LOOPBACK}/32 scram-sha-256",
                    f"host all all {LOOPBACK}/32 scram-sha-256",
                ],
                # A spread checkpoint would make each new replica wait for it.
                "basebackup": [{"checkpoint": "fast"}],
                # When pg_rewind cannot bring a member back, copy it afresh
                # rather than leave it out of the cluster.
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
            },
            "watchdog": {"mode": "off"},
        }

    def _start_patroni(self, member: Member) -> None:
        self._patroni[member.name] = self._launch(
            [self._patroni_program, str(member.config_file)], member.log_file, user=_system_user()
        )

    def _launch(
        self, command: Sequence[str], log: Path, *, user: pwd.struct_passwd | None
    ) -> subprocess.Popen[bytes]:
        """Start a process in a session of its own (its group can be signalled), output to log."""
        environment = self._environment()
        command = list(command)
        if user is not None:
            environment["HOME"] = str(log.parent)
            environment["USER"] = environment["LOGNAME"] = user.pw_name
            # Not Popen's user=/group=: with those Python forks instead of
            # vforking, and a fork in a process whose gRPC threads are busy
            # (a load runs while a member is restarted) runs gRPC's fork
            # handlers in the child, which crashed it. setpriv changes the
            # ids in the new program instead.
            command = [
                SETPRIV,
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--clear-groups",
                "--",
                *command,
            ]
        with log.open("ab") as output:
            process = subprocess.Popen(
                command,
                cwd=log.parent,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._started.append(process)
        return process

    def _signal_group(self, process: subprocess.Popen[bytes], sig: int) -> None:
        """Signal the process group `process` leads, only while it is not reaped
        (until then its pid, the group's id, cannot be reused)."""
        if process.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)

    def _reap(self, process: subprocess.Popen[bytes]) -> None:
        with suppress(subprocess.TimeoutExpired):
            process.wait(PROCESS_GONE_SECONDS)

    def close(self) -> None:
        """Stop everything, in order: Patroni (it stops its postgres), postmasters left, etcd.

        Every step runs even when one before it failed; what could not be
        stopped is reported at the end.
        """
        problems: list[str] = []
        steps: list[tuple[str, Callable[[], None]]] = [
            ("thaw", self._thaw_everything),
            ("stop Patroni", self._stop_patronis),
            ("stop postmasters", self._stop_postmasters),
            ("stop what is left", lambda: self._kill_left(keep_etcd=True)),
            ("stop etcd", self._stop_etcd),
            ("stop what is left", lambda: self._kill_left(keep_etcd=False)),
            ("release shared memory", self._release_shared_memory),
        ]
        for what, step in steps:
            try:
                step()
            except Exception as error:
                problems.append(f"{what}: {type(error).__name__}: {error}")
        for process in self._started:
            if process.returncode is None:
                with suppress(subprocess.TimeoutExpired):
                    process.wait(PROCESS_GONE_SECONDS)
        left = self._ours()
        if left:
            problems.append(f"still running: {', '.join(_describe_process(p) for p in left)}")
        shutil.rmtree(self.directory, ignore_errors=True)
        if problems:
            raise HaClusterError("the cluster did not stop cleanly: " + "; ".join(problems))

    def _thaw_everything(self) -> None:
        """A stopped process handles no SIGTERM, SIGINT or SIGQUIT: resume all of ours first
        (a fast shutdown would wait forever for a stopped backend or walsender)."""
        stopped = [pid for pids in [*self._frozen.values(), *self._held.values()] for pid in pids]
        self._frozen.clear()
        self._held.clear()
        for pid in stopped:
            _signal(pid, signal.SIGCONT)
        for process in self._patroni.values():
            self._signal_group(process, signal.SIGCONT)
        for found in self._ours():
            with suppress(psutil.Error):
                found.resume()

    def _ours(self) -> list[psutil.Process]:
        """The live processes of this cluster: those carrying its mark, and those working in
        its directory. Both are needed: a postgres child process overwrites its environment
        with its title (ps shows it), so only its postmaster still carries the mark, while
        its working directory is the data directory."""
        found = []
        for process in psutil.process_iter(["status"]):
            if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            with suppress(psutil.Error, ValueError):
                if process.environ().get(MARK) == self._mark or Path(process.cwd()).is_relative_to(
                    self.directory
                ):
                    found.append(process)
        return found

    def _stop_patronis(self) -> None:
        running = [p for name, p in self._patroni.items() if p.poll() is None]
        for process in running:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + PATRONI_STOP_SECONDS
        for process in running:
            with suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            if process.poll() is None:
                self._signal_group(process, signal.SIGKILL)
                self._reap(process)

    def _stop_postmasters(self) -> None:
        """Postmasters Patroni left (killed Patroni, or one that did not stop in time):
        immediate shutdown (SIGQUIT), then SIGKILL."""
        for member in self.members:
            pids = member.postgres_pids()
            if not pids:
                continue
            _signal(pids[0], signal.SIGQUIT)
            if not _wait_gone(pids, PROCESS_GONE_SECONDS):
                for pid in pids:
                    _signal(pid, signal.SIGKILL)
                _wait_gone(pids, PROCESS_GONE_SECONDS)

    def _stop_etcd(self) -> None:
        if self._etcd is None or self._etcd.poll() is not None:
            return
        self._etcd.terminate()
        try:
            self._etcd.wait(PROCESS_GONE_SECONDS)
        except subprocess.TimeoutExpired:
            self._signal_group(self._etcd, signal.SIGKILL)
            self._reap(self._etcd)

    def _kill_left(self, *, keep_etcd: bool) -> None:
        """Whatever of this cluster the steps before missed: SIGKILL."""
        etcd = self._etcd.pid if keep_etcd and self._etcd is not None else None
        left = [p for p in self._ours() if p.pid != etcd]
        for process in left:
            with suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=PROCESS_GONE_SECONDS)

    def _release_shared_memory(self) -> None:
        """A SIGKILLed postmaster leaves its System V segment behind (a clean exit removes
        it): remove those no process is attached to, named in leftover postmaster.pid files."""
        for member in self.members:
            try:
                lines = (member.data_dir / "postmaster.pid").read_text().splitlines()
                shmid = int(lines[6].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if _shm_attached(shmid) == 0:
                subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, check=False)


@contextmanager
def patroni_cluster(
    *,
    patroni: str | None = None,
    etcd: str | None = None,
    members: int = 3,
    database: str = "coordinator",
) -> Iterator[PatroniCluster]:
    """A Patroni cluster of `members` members and etcd, ready when yielded, stopped after.

    Ready: a leader, a synchronous standby streaming, every member running
    without lag, and `database` created on the primary. Three members, since
    in strict synchronous mode two stop taking writes while either is down.
    `patroni` and `etcd` are the programs (default: found on PATH).
    """
    patroni = patroni or shutil.which("patroni")
    etcd = etcd or shutil.which("etcd")
    if not patroni or not etcd:
        raise HaClusterError(
            "patroni and etcd are needed: install Debian's patroni and etcd-server packages"
        )
    if members < 2:
        raise HaClusterError("a cluster with synchronous replication needs two members at least")
    directory = Path(tempfile.mkdtemp(prefix="coordinator-patroni-"))
    cluster = PatroniCluster(
        patroni=patroni, etcd=etcd, members=members, database=database, directory=directory
    )
    try:
        cluster._start()
        yield cluster
    except BaseException as error:
        # The error that brought us here matters more than a failed cleanup.
        try:
            cluster.close()
        except HaClusterError as cleanup:
            error.add_note(str(cleanup))
        raise
    else:
        cluster.close()


def _system_user() -> pwd.struct_passwd | None:
    """The unprivileged user postgres runs as when we are root (postgres refuses root),
    created the way pgserver creates it; None: run it as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", SYSTEM_USER], check=True, capture_output=True)
        return pwd.getpwnam(SYSTEM_USER)


def _get_json(url: str) -> Any:
    """The JSON at url, or None when nothing (valid) answers within HTTP_SECONDS."""
    try:
        return httpx.get(url, timeout=HTTP_SECONDS).json()
    except (httpx.HTTPError, ValueError):
        return None


@contextmanager
def _socket_deadline(conn: psycopg.Connection[Any], timeout: float) -> Iterator[None]:
    """Shut the connection's socket down if the block is still running after `timeout`.

    The client then sees the connection closed and raises, whatever the
    server is doing (waiting for a standby, or stopped).
    """
    lock = threading.Lock()
    finished = False

    def expire() -> None:
        with lock:
            if not finished:
                with suppress(OSError):
                    sock = socket.socket(fileno=os.dup(conn.fileno()))
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            finished = True
        timer.cancel()


def _signal(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout: float) -> bool:
    """Whether all of pids are gone (or zombies) within timeout."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            with suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _shm_attached(shmid: int) -> int | None:
    """How many processes are attached to this System V segment (None: no such segment)."""
    with suppress(OSError):
        for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1]) == shmid:
                return int(fields[6])
    return None


def _describe(members: dict[str, dict[str, Any]]) -> str:
    return ", ".join(
        f"{name} {m.get('role')} {m.get('state')} tl={m.get('timeline')} lag={m.get('lag', '-')}"
        for name, m in members.items()
    )


def _describe_process(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:120]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def _tail(log: Path, lines: int, title: str) -> str:
    """The last lines of a log, without Patroni's "no action" line of every quiet loop
    (they would fill the tail)."""
    try:
        text = [line for line in log.read_text(errors="replace").splitlines() if _QUIET not in line]
    except OSError:
        text = ["(no log)"]
    text = text[-lines:]
    return f"--- {title} ({log}) ---\n" + "\n".join(text)
