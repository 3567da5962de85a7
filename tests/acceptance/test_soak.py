"""The consistency soak (bench/soak): a short run under real faults, and a verdict that sees.

The verdict's tests plant each kind of mismatch in otherwise clean evidence
and watch it fail; the slow test runs `python -m bench.soak` for real.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.soak.chaos import FaultKind, plan_faults
from bench.soak.verdict import Ack, AckRecord, Delivery, Evidence, GroupEvidence, judge

REPO = Path(__file__).resolve().parents[2]


def _group(*deliveries: tuple[str, int], acks: tuple[tuple[str, int, Ack], ...]) -> GroupEvidence:
    return GroupEvidence(
        deliveries=tuple(Delivery(m, a) for m, a in deliveries),
        acks=tuple(AckRecord(m, a, outcome) for m, a, outcome in acks),
    )


# m1 and m2 committed; m3 rolled back, never delivered. Group a acked m1 at
# once and m2 only on its second delivery (the first was left unacked);
# group b's first ack of m1 was stale because m1 had been received again.
CLEAN = Evidence(
    committed_locally=frozenset({"m1", "m2"}),
    coordinator_states={"m1": "committed", "m2": "committed", "m3": "rolled_back"},
    groups={
        "a": _group(
            ("m1", 1), ("m2", 1), ("m2", 2),
            acks=(("m1", 1, Ack.ACKED), ("m2", 2, Ack.ACKED)),
        ),
        "b": _group(
            ("m1", 1), ("m1", 2), ("m2", 1),
            acks=(("m1", 1, Ack.STALE), ("m1", 2, Ack.ACKED), ("m2", 1, Ack.NOT_FOUND)),
        ),
    },
)  # fmt: skip


def _with_group(evidence: Evidence, name: str, group: GroupEvidence) -> Evidence:
    return replace(evidence, groups={**evidence.groups, name: group})


def test_clean_evidence_passes_and_counts_redeliveries() -> None:
    verdict = judge(CLEAN)
    assert verdict.ok, verdict.problems
    assert [(g.group, g.deliveries, g.distinct, g.duplicates) for g in verdict.groups] == [
        ("a", 3, 2, 1),
        ("b", 3, 2, 1),
    ]


def test_a_lost_message_fails() -> None:
    a = CLEAN.groups["a"]
    lost = replace(a, deliveries=tuple(d for d in a.deliveries if d.message_id != "m2"))
    verdict = judge(_with_group(CLEAN, "a", lost))
    assert not verdict.ok
    assert verdict.groups[0].lost == {"m2"}
    assert any("a: lost" in problem and "m2" in problem for problem in verdict.problems)


def test_a_delivered_rollback_fails() -> None:
    a = CLEAN.groups["a"]
    leaked = replace(a, deliveries=(*a.deliveries, Delivery("m3", 1)))
    verdict = judge(_with_group(CLEAN, "a", leaked))
    assert not verdict.ok
    assert verdict.groups[0].unexpected == {"m3"}


def test_a_delivery_after_a_confirmed_ack_fails() -> None:
    a = CLEAN.groups["a"]
    again = replace(a, deliveries=(*a.deliveries, Delivery("m1", 2)))
    verdict = judge(_with_group(CLEAN, "a", again))
    assert not verdict.ok
    assert verdict.groups[0].unexpected_duplicates == {"m1"}
    assert verdict.groups[0].lost == frozenset() and verdict.groups[0].unexpected == frozenset()


def test_one_attempt_delivered_twice_fails() -> None:
    """Two consumers holding the same message at once, although neither acked it."""
    b = CLEAN.groups["b"]
    twice = replace(b, deliveries=(*b.deliveries, Delivery("m2", 1)))
    assert judge(_with_group(CLEAN, "b", twice)).groups[1].unexpected_duplicates == {"m2"}


def test_two_confirmed_acks_of_one_message_fail() -> None:
    a = CLEAN.groups["a"]
    acked_twice = replace(a, acks=(*a.acks, AckRecord("m2", 1, Ack.ACKED)))
    assert not judge(_with_group(CLEAN, "a", acked_twice)).ok


def test_a_redelivery_after_an_unconfirmed_ack_passes() -> None:
    """A 404 or a failed ack proves nothing: the message may well come back."""
    b = CLEAN.groups["b"]
    back = replace(b, deliveries=(*b.deliveries, Delivery("m2", 2)))
    assert judge(_with_group(CLEAN, "b", back)).ok


def test_a_message_left_prepared_fails() -> None:
    stuck = replace(CLEAN, coordinator_states={**CLEAN.coordinator_states, "m4": "prepared"})
    verdict = judge(stuck)
    assert verdict.stuck_prepared == {"m4"}
    assert any("left prepared" in problem for problem in verdict.problems)


def test_the_coordinator_disagreeing_with_the_truth_fails() -> None:
    states = {**CLEAN.coordinator_states, "m2": "rolled_back", "m3": "committed"}
    verdict = judge(replace(CLEAN, coordinator_states=states))
    assert verdict.not_committed_by_coordinator == {"m2"}
    assert verdict.committed_without_local_commit == {"m3"}
    assert not verdict.ok


def test_a_dead_letter_fails() -> None:
    a = replace(CLEAN.groups["a"], dead_letters=frozenset({"m2"}))
    assert not judge(_with_group(CLEAN, "a", a)).ok


def test_a_run_that_did_not_settle_fails() -> None:
    assert not judge(replace(CLEAN, settled=False)).ok


def test_a_run_without_commits_fails_rather_than_passing_vacuously() -> None:
    verdict = judge(Evidence(frozenset(), {}, {"a": GroupEvidence(), "b": GroupEvidence()}))
    assert verdict.problems == ("no local transaction committed: the run proves nothing",)


@pytest.mark.parametrize("seed", range(20))
def test_every_fault_plan_kills_a_node_and_restarts_postgres(seed: int) -> None:
    plan = plan_faults(random.Random(seed), seconds=60, nodes=2, postgres=True)
    kinds = {fault.kind for fault in plan}
    assert FaultKind.NODE in kinds
    assert kinds & {FaultKind.POSTGRES_FAST, FaultKind.POSTGRES_IMMEDIATE}
    ends = [fault.at + fault.down_seconds for fault in plan]
    assert all(end <= nxt.at for end, nxt in zip(ends, plan[1:], strict=False))
    assert ends[-1] <= 60 - 5
    without = plan_faults(random.Random(seed), seconds=60, nodes=2, postgres=False)
    assert not any(fault.kind.postgres for fault in without)


@pytest.mark.slow
def test_the_soak_passes_under_faults() -> None:
    """About two minutes: Postgres, two nodes, four producers, two consumer groups, chaos."""
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    command = [sys.executable, "-m", "bench.soak", "--seconds", "60", "--producers", "4"]
    command += ["--nodes", "2", "--seed", "3", "--settle-seconds", "45", "--json"]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=175)
    except subprocess.TimeoutExpired:
        # SIGTERM: the soak stops everything it started before it exits.
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(f"the soak ran too long:\n{stderr[-4000:]}")
    assert process.returncode == 0, stderr[-4000:]
    report = json.loads(stdout)
    assert report["ok"] and report["problems"] == []
    faults = report["faults"]
    assert faults["coordinator_kills"] >= 1
    assert faults["postgres_restarts"] >= 1
    assert faults["producer_kills"] >= 1
    assert report["local_commits"] > 0 and report["coordinator"]["rolled_back"] > 0
    assert report["coordinator"]["prepared"] == 0
    # Check-backs resolved both ways: what the unknowns, raises and kills need.
    assert report["resolutions"].get("check -> committed", 0) > 0
    assert report["resolutions"].get("check -> rolled_back", 0) > 0
    for name, group in report["groups"].items():
        assert group["duplicates"] > 0, f"group {name}: no redelivery happened"
        assert group["distinct"] == report["local_commits"], name
        assert (group["lost"], group["unexpected"], group["duplicates_after_ack"]) == (0, 0, 0)
    assert time.monotonic() - started < 180
