"""The exactly-once soak (bench/soak/exactly_once): a short run under kills, a verdict that sees.

The verdict's tests plant each kind of mismatch in otherwise clean evidence
and watch it fail; the slow test runs `python -m bench.soak --exactly-once`
for real.
"""

from __future__ import annotations

import itertools
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

from bench.soak.exactly_once.kills import GROUP_DOWN_SECONDS, KillKind, plan_kills
from bench.soak.exactly_once.verdict import Evidence, judge

REPO = Path(__file__).resolve().parents[2]

# o1 and o2 committed (messages m1, m2); o3 began and rolled back (m3).
# Both groups wrote o1 and o2 once each, with their amounts.
CLEAN = Evidence(
    committed={"o1": 100, "o2": 250},
    begun=frozenset({"o1", "o2", "o3"}),
    committed_messages=frozenset({"m1", "m2"}),
    coordinator_states={"m1": "committed", "m2": "committed", "m3": "rolled_back"},
    groups={"a": {"o1": [100], "o2": [250]}, "b": {"o2": [250], "o1": [100]}},
)


def _with_group(evidence: Evidence, name: str, rows: dict[str, list[int]]) -> Evidence:
    return replace(evidence, groups={**evidence.groups, name: rows})


def test_clean_evidence_passes() -> None:
    verdict = judge(CLEAN)
    assert verdict.ok, verdict.problems
    assert (verdict.committed, verdict.rolled_back_locally) == (2, 1)
    assert [(g.group, g.rows, g.orders) for g in verdict.groups] == [("a", 2, 2), ("b", 2, 2)]


def test_a_missing_order_fails() -> None:
    verdict = judge(_with_group(CLEAN, "a", {"o1": [100]}))
    assert not verdict.ok
    assert verdict.groups[0].missing == {"o2"}
    assert any("a: missing" in problem and "o2" in problem for problem in verdict.problems)


def test_an_order_written_twice_fails() -> None:
    """The handler's effect twice: what the inbox is there to prevent."""
    verdict = judge(_with_group(CLEAN, "b", {"o1": [100, 100], "o2": [250]}))
    assert not verdict.ok
    assert verdict.groups[1].duplicated == {"o1"}
    assert verdict.groups[1].missing == frozenset() and verdict.groups[1].unexpected == frozenset()
    assert any("b: written more than once" in problem for problem in verdict.problems)


def test_a_rolled_back_order_written_fails() -> None:
    verdict = judge(_with_group(CLEAN, "a", {"o1": [100], "o2": [250], "o3": [7]}))
    assert not verdict.ok
    assert verdict.groups[0].rolled_back == {"o3"}
    assert any("rolled back locally, yet written" in problem for problem in verdict.problems)


def test_an_order_nobody_began_written_fails() -> None:
    verdict = judge(_with_group(CLEAN, "a", {"o1": [100], "o2": [250], "x9": [1]}))
    assert verdict.groups[0].unexpected == {"x9"} and verdict.groups[0].rolled_back == frozenset()
    assert any("never begun" in problem for problem in verdict.problems)


def test_a_wrong_amount_fails() -> None:
    verdict = judge(_with_group(CLEAN, "b", {"o1": [100], "o2": [251]}))
    assert verdict.groups[1].wrong_amount == {"o2"}
    assert not verdict.ok


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


def test_a_barrier_disagreeing_with_the_orders_fails() -> None:
    """A committed barrier row without its order (or the reverse): check-backs would lie."""
    verdict = judge(replace(CLEAN, barrier_disagreements=frozenset({"t7"})))
    assert any("barrier and order rows disagree: 1 (t7)" in p for p in verdict.problems)


def test_a_run_that_did_not_settle_fails() -> None:
    assert not judge(replace(CLEAN, settled=False)).ok


def test_a_run_without_commits_fails_rather_than_passing_vacuously() -> None:
    empty = Evidence({}, frozenset(), frozenset(), {}, {"a": {}, "b": {}})
    assert judge(empty).problems == ("no local transaction committed: the run proves nothing",)


@pytest.mark.parametrize("seed", range(20))
def test_every_kill_plan_kills_each_kind(seed: int) -> None:
    plan = plan_kills(random.Random(seed), seconds=40, producers=4, groups=2, consumers=4)
    assert {kill.kind for kill in plan} == set(KillKind)
    for kill in plan:
        assert kill.at + kill.down_seconds <= 40 - 5
        if kill.kind is KillKind.PRODUCER_GROUP:
            assert kill.down_seconds >= GROUP_DOWN_SECONDS[0]
    assert all(a.at <= b.at for a, b in itertools.pairwise(plan))


@pytest.mark.slow
def test_the_exactly_once_soak_passes_under_kills() -> None:
    """About a minute: PostgreSQL, two nodes, four producers, two groups of two consumers, kills."""
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    command = [sys.executable, "-m", "bench.soak", "--exactly-once", "--seconds", "40"]
    command += ["--producers", "4", "--nodes", "2", "--consumers-per-group", "2"]
    command += ["--seed", "3", "--settle-seconds", "30", "--json"]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        # SIGTERM: the soak stops everything it started before it exits.
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(f"the soak ran too long:\n{stderr[-4000:]}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr[-4000:]
    report = json.loads(stdout)
    assert report["ok"] and report["problems"] == []
    faults = report["faults"]
    assert faults["coordinator_kills"] >= 1
    assert faults["producer_kills_planned"] >= 1 and faults["producer_groups_killed"] >= 1
    assert faults["consumer_kills"] >= 1
    orders = report["orders"]
    assert orders["committed_locally"] > 0 and orders["rolled_back_locally"] > 0
    assert report["coordinator"]["prepared"] == 0
    assert set(report["check_sources_registered"]) == {"only", "fallback"}
    # Half messages of dead producers: the database settled some.
    assert report["settled_by_check"]["database"] > 0
    for name, group in report["groups"].items():
        assert group["orders"] == orders["committed_locally"], name
        assert group["order_rows"] == group["orders"], name
        assert group["skipped_by_inbox"] > 0, f"group {name}: the inbox skipped nothing"
        assert group["failed"] > 0, f"group {name}: no handler failed"
    assert time.monotonic() - started < 180
