"""Failover scenarios: a fault made to a Patroni cluster's primary while a load runs.

Each scenario starts the load on a coordinator whose database URL names
every member, breaks the primary the way one kind of failure would, waits
until producers are acknowledged again, lets the load run on a little,
drains the consumers, and holds what was acknowledged against the new
primary (`verify`). Then it brings the broken member back, so the next
scenario starts from a whole cluster again.

The faults (bench/ha_cluster.py has what Patroni does after each):

- node_kill: the primary's machine dies (Patroni and all of its postgres
  SIGKILLed); Patroni promotes the synchronous standby after its ttl.
- postmaster_kill: the primary's postmaster dies, its Patroni lives and
  starts it again (crash recovery; no failover).
- patroni_kill: only the primary's Patroni dies, as with a crashed agent; its
  postgres stays writable, the standby is promoted after the ttl, and the
  old primary's commits then hang in their synchronous wait until its
  Patroni is restarted at +20 s (as systemd would) and demotes it.
- cut_wait: the primary's walsenders stop (replication cut), so commits
  wait for the standby, and those waits are cancelled (pg_cancel_backend,
  as an operator or a client's cancel would): PostgreSQL commits them
  locally, and the coordinator must not acknowledge them. Then the primary
  dies: the promoted standby never had those commits.
- frozen_primary: the primary's whole node stops (SIGSTOP) for 20 s, as a
  hung machine or a partition: connections stay open and nothing answers;
  the standby is promoted meanwhile, and the old primary wakes up to it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench.failover.config import LoadConfig
from bench.failover.ledger import PRODUCING, Snapshot
from bench.failover.load import Load
from bench.failover.verify import Outage, Verification, outage, verify
from bench.ha_cluster import Member, PatroniCluster

# When the Patroni-only kill's agent comes back, as systemd would restart it.
PATRONI_RESTART_SECONDS = 20.0
# How long a cut synchronous wait goes on (cancelled as it comes) before the kill.
CUT_SECONDS = 4.0
# Longer than a failover (the standby is promoted 10 to 12 s into the freeze),
# so the old primary wakes up to a new leader.
FROZEN_SECONDS = 20.0
WARMUP_SECONDS = 2.0  # load before the fault
AFTER_SECONDS = 2.0  # load after producers are acknowledged again
RECOVERY_SECONDS = 120.0  # the most a scenario waits for producers to be acknowledged again
DRAIN_SECONDS = 90.0


@dataclass(frozen=True)
class Fault:
    """What a scenario does to the primary, and how the member is brought back after."""

    name: str
    what: str
    # Breaks `primary`; may take a while (a freeze, a restart at +20 s): it
    # runs in a thread of its own while the load goes on.
    make: Callable[[PatroniCluster, Member, threading.Event], None]
    # Brings `primary` back once the scenario is over (the cluster heals itself after some).
    restore: Callable[[PatroniCluster, Member], None]
    # The longest producers may go unacknowledged, in seconds, with the
    # coordinator's defaults (database_deadline_seconds=5) and the cluster's
    # timings (ttl 10, loop_wait 2): Patroni's failover plus one deadline,
    # with room for a busy 2-core machine.
    outage_bound: float


def _nothing(cluster: PatroniCluster, member: Member) -> None:
    pass


def _kill_node(cluster: PatroniCluster, primary: Member, stop: threading.Event) -> None:
    cluster.kill_node(primary)


def _kill_postmaster(cluster: PatroniCluster, primary: Member, stop: threading.Event) -> None:
    cluster.kill_postmaster(primary)


def _kill_patroni(cluster: PatroniCluster, primary: Member, stop: threading.Event) -> None:
    cluster.kill_patroni(primary)
    stop.wait(PATRONI_RESTART_SECONDS)
    cluster.start_member(primary)


def _cut_wait(cluster: PatroniCluster, primary: Member, stop: threading.Event) -> None:
    cluster.hold_replication(primary)
    until = time.monotonic() + CUT_SECONDS
    while time.monotonic() < until and not stop.is_set():
        cluster.cancel_sync_waits(primary)
        time.sleep(0.05)
    cluster.kill_node(primary)


def _freeze(cluster: PatroniCluster, primary: Member, stop: threading.Event) -> None:
    cluster.freeze(primary)
    try:
        stop.wait(FROZEN_SECONDS)
    finally:
        cluster.thaw(primary)


FAULTS: dict[str, Fault] = {
    fault.name: fault
    for fault in (
        Fault(
            "node_kill",
            "the primary's node killed (Patroni and postgres)",
            _kill_node,
            lambda cluster, member: cluster.start_member(member),
            outage_bound=40.0,
        ),
        Fault(
            "postmaster_kill",
            "the primary's postmaster killed; its Patroni restarts it",
            _kill_postmaster,
            _nothing,
            outage_bound=40.0,
        ),
        Fault(
            "patroni_kill",
            f"the primary's Patroni killed, restarted at +{PATRONI_RESTART_SECONDS:g} s",
            _kill_patroni,
            _nothing,
            # Until its Patroni is back and demotes it, the old primary takes
            # connections and its commits hang (see docs/high-availability.md).
            outage_bound=PATRONI_RESTART_SECONDS + 40.0,
        ),
        Fault(
            "cut_wait",
            f"replication cut and waiting commits cancelled for {CUT_SECONDS:g} s, "
            "then the primary's node killed",
            _cut_wait,
            lambda cluster, member: cluster.start_member(member),
            outage_bound=CUT_SECONDS + 40.0,
        ),
        Fault(
            "frozen_primary",
            f"the primary's node frozen (SIGSTOP) for {FROZEN_SECONDS:g} s",
            _freeze,
            _nothing,
            outage_bound=40.0,
        ),
    )
}


@dataclass(frozen=True)
class ScenarioResult:
    fault: str
    old_primary: str
    new_primary: str
    outage: Outage  # around the fault, all producers (kit's measure)
    # The longest time producers went without a 2xx, from the fault to the
    # end of the run: for a fault whose effect comes later (a Patroni-only
    # kill hurts once the standby is promoted) the outage is not at the fault.
    longest_gap_seconds: float
    answered_during: int  # requests answered (not 2xx) within that longest gap
    longest_answer_seconds: float  # the longest any request waited for an answer
    verification: Verification
    snapshot: Snapshot = field(repr=False)

    @property
    def lost(self) -> int:
        return self.verification.lost


def run_scenario(
    cluster: PatroniCluster,
    fault: Fault,
    load_config: LoadConfig,
    *,
    progress: Callable[[str], None] = lambda line: None,
) -> ScenarioResult:
    """Run one fault under the load; the cluster is whole again when it returns."""
    primary = cluster.wait_healthy()
    progress(f"{fault.name}: primary {primary.name}, load starting")
    stop_fault = threading.Event()
    with Load(load_config) as load:  # started
        _until(lambda: load.ledger.oks_since(load.started_at) >= 20, 60, "the load got going")
        time.sleep(WARMUP_SECONDS)
        fault_at = time.monotonic()
        progress(f"{fault.name}: {fault.what}")
        with _in_thread(fault.make, cluster, primary, stop_fault) as faulting:
            # The fault may not hurt at once (a Patroni-only kill hurts once
            # the standby is promoted): wait for it to end, or for producers
            # to be acknowledged again after a failure, whichever is later.
            _until(
                lambda: not faulting.is_alive() and _recovered(load, fault_at),
                RECOVERY_SECONDS + _fault_length(fault),
                "producers acknowledged again after the fault",
            )
        time.sleep(AFTER_SECONDS)
        load.stop_producers()
        progress(f"{fault.name}: producers stopped, draining the consumers")
        load.drain(DRAIN_SECONDS)
        load.stop()
    snapshot = load.ledger.snapshot()
    fault.restore(cluster, primary)
    new_primary = cluster.wait_healthy()
    progress(f"{fault.name}: cluster whole again, primary {new_primary.name}; verifying")
    verification = verify(snapshot, cluster.url())
    gap, answered = _longest_gap(snapshot, fault_at)
    return ScenarioResult(
        fault=fault.name,
        old_primary=primary.name,
        new_primary=new_primary.name,
        outage=outage(snapshot, fault_at).overall,
        longest_gap_seconds=gap,
        answered_during=answered,
        longest_answer_seconds=_longest_answer(snapshot),
        verification=verification,
        snapshot=snapshot,
    )


def _fault_length(fault: Fault) -> float:
    return {"patroni_kill": PATRONI_RESTART_SECONDS, "frozen_primary": FROZEN_SECONDS}.get(
        fault.name, CUT_SECONDS
    )


def _recovered(load: Load, fault_at: float) -> bool:
    """A producer was acknowledged after the last failure seen since the fault."""
    answers = [
        a for a in load.ledger.snapshot().answers if a.kind in PRODUCING and a.sent_at >= fault_at
    ]
    failures = [a.sent_at for a in answers if not a.ok]
    last_failure = max(failures, default=fault_at)
    return any(a.ok and a.sent_at > last_failure for a in answers)


def _longest_gap(snapshot: Snapshot, fault_at: float) -> tuple[float, int]:
    """The longest stretch after the fault without a producer's 2xx, and the non-2xx in it."""
    producing = [a for a in snapshot.answers if a.kind in PRODUCING and a.answered]
    oks = sorted(a.answered_at for a in producing if a.ok)
    before = [t for t in oks if t <= fault_at]
    marks = [before[-1] if before else fault_at, *[t for t in oks if t > fault_at]]
    if len(marks) < 2:
        return float("inf"), 0
    start, end = max(itertools.pairwise(marks), key=lambda pair: pair[1] - pair[0])
    answered = sum(1 for a in producing if not a.ok and start < a.answered_at < end)
    return end - start, answered


def _longest_answer(snapshot: Snapshot) -> float:
    """The longest any producer's request waited for its answer (a long poll's wait aside)."""
    return max((a.seconds for a in snapshot.answers if a.kind in PRODUCING), default=0.0)


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


@contextmanager
def _in_thread(
    make: Callable[[PatroniCluster, Member, threading.Event], None],
    cluster: PatroniCluster,
    primary: Member,
    stop: threading.Event,
) -> Iterator[threading.Thread]:
    """Run the fault in a thread; on the way out (also on failure) end its waits and join it."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            make(cluster, primary, stop)
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="fault", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=120)
    if failure:
        raise RuntimeError("the fault could not be made") from failure[0]
