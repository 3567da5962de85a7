"""The benchmark command runs end to end (its figures are not judged here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from bench import history_cost, retention_layouts
from bench.grpc_load import TOPIC as GRPC_TOPIC
from bench.run import main
from bench.server import coordinator_process
from bench.steady_load import CONSUMER_GROUPS
from tests.processes import live_processes

pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_every_part_and_writes_json(
    tmp_path: Path, database_url: str, db: psycopg.Connection
) -> None:
    out = tmp_path / "result.json"
    main(
        [
            "--database-url", database_url,
            "--concurrency", "4", "8",
            # 2 has no HTTP row, so it gets a baseline of its own; 4 shares the HTTP row's.
            "--grpc-concurrency", "2", "4",
            "--seconds", "1",
            "--batch-size", "20",
            "--resolved-rows", "1000",
            "--backlog", "300",
            "--latency-samples", "5",
            "--push-messages", "100",
            "--out", str(out),
        ]
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["baseline"]["messages_per_second"] > 0
    assert [run["producers"] for run in report["concurrency"]] == [4, 8]
    assert all(run["ratio"] > 0 for run in report["concurrency"])
    best = report["best_single_vs_best_baseline"]
    assert best["messages_per_second"] == max(
        run["http_single"]["messages_per_second"] for run in report["concurrency"]
    )
    assert best["baseline_messages_per_second"] == round(
        max(run["baseline"]["messages_per_second"] for run in report["concurrency"]), 1
    )
    assert best["ratio"] == pytest.approx(
        best["messages_per_second"] / best["baseline_messages_per_second"], abs=0.002
    )
    for part in ("http_single", "http_batch", "commit_to_consumer"):
        assert report[part]["messages"] > 0, part
        assert report[part]["p99_ms"] >= report[part]["p50_ms"] > 0, part
    assert [c["resolved_rows"] for c in report["check_claim"]] == [1000, 10000]
    assert all(c["backlog"] == 300 for c in report["check_claim"])
    assert report["claim_time_growth_10x"] > 0

    # gRPC rows: each next to a baseline with as many clients, and what they
    # counted is what the database holds as committed on the gRPC topic.
    grpc_rows = report["grpc_single"]
    assert [row["producers"] for row in grpc_rows] == [2, 4]
    for row in grpc_rows:
        assert row["baseline"]["clients"] == row["producers"]
        assert row["baseline"]["messages_per_second"] > 0
        run = row["grpc_single"]
        assert run["messages"] > 0
        assert run["p99_ms"] >= run["p50_ms"] > 0
        assert row["ratio"] == pytest.approx(
            run["messages_per_second"] / row["baseline"]["messages_per_second"], abs=0.002
        )
        if sys.platform == "linux":  # read from /proc
            assert run["cpu_per_message"]["server_us"] > 0
            assert run["cpu_per_message"]["load_generator_us"] > 0
            assert "postgres_us" in run["cpu_per_message"]
    if sys.platform == "linux":
        assert report["concurrency"][0]["http_single"]["cpu_per_message"]["server_us"] > 0
    floor = report["grpc_floor"]
    assert floor["producers"] == 2
    assert floor["floor"]["messages"] > 0
    assert floor["ratio"] > 0
    states = dict(
        db.execute(
            "SELECT state, count(*) FROM messages WHERE topic = %s GROUP BY state", (GRPC_TOPIC,)
        ).fetchall()
    )
    # The measured messages plus the warm-up's, every one committed.
    assert set(states) == {"committed"}
    assert states["committed"] >= sum(row["grpc_single"]["messages"] for row in grpc_rows)
    (deliveries,) = db.execute(
        "SELECT count(*) FROM deliveries WHERE topic = %s", (GRPC_TOPIC,)
    ).fetchone()
    assert deliveries == states["committed"], "each commit made one delivery to the subscriber"
    consumers = report["consumers"]
    for drain in ("http_simple_consumer", "grpc_push_consumer"):
        assert consumers[drain]["messages"] == 100, drain
        assert consumers[drain]["messages_per_second"] > 0, drain


def test_ab_quick(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    subprocess.run(
        [sys.executable, "-m", "bench.ab", "--quick", "--base", "HEAD", "--out", str(out)],
        cwd=REPOSITORY,
        check=True,
        timeout=600,
    )
    report = json.loads(out.read_text())
    assert report["sides"]["base"]["asked"] == "HEAD"
    assert Path(report["sides"]["candidate"]["asked"]) == REPOSITORY
    assert [(row["load"], row["producers"]) for row in report["summary"]] == [
        ("single", 16),
        ("batch", 4),
    ]
    for row in report["summary"]:
        assert row["baseline"]["median"] > 0
        for side in ("base", "candidate"):
            assert row[side]["median"] > 0, (row["load"], side)
            assert row[side]["vs_baseline"]["median"] > 0, (row["load"], side)
        assert row["candidate_vs_base"]["median"] > 0
    assert [r["order"] for r in report["rounds"]] == [["base", "candidate"]]
    worktrees = subprocess.run(
        ["git", "-C", str(REPOSITORY), "worktree", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "coordinator-ab-" not in worktrees, "the base's temporary worktree was removed"


def test_a_server_runs_the_code_of_the_source_tree_it_is_given(
    tmp_path: Path, database_url: str
) -> None:
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns("__pycache__")
    for part in ("coordinator", "migrations"):
        shutil.copytree(REPOSITORY / part, tree / part, ignore=skip)
    marker = "0.0.0+source-tree"
    init = tree / "coordinator" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "0.1.0"', f'__version__ = "{marker}"'))
    assert marker in init.read_text()

    with coordinator_process(database_url, source=tree) as server:
        document = httpx.get(f"{server.url}/openapi.json").json()
    assert document["info"]["version"] == marker
    with coordinator_process(database_url) as server:
        document = httpx.get(f"{server.url}/openapi.json").json()
    assert document["info"]["version"] != marker


def test_retention_layouts_quick(tmp_path: Path, database_url: str, db: psycopg.Connection) -> None:
    out = tmp_path / "retention.json"
    # 4,000 messages over 4 days, the oldest day removed: 1,000 messages.
    retention_layouts.main(
        [
            "--database-url", database_url,
            "--quick",
            "--rows", "4000",
            "--days", "4",
            "--remove", "0.25",
            "--clients", "2",
            "--seconds", "0.5",
            "--rounds", "1",
            "--out", str(out),
        ]
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert set(report["layouts"]) == {"plain", "partitioned"}
    for name, layout in report["layouts"].items():
        for window in ("empty", "filled", "emptied"):
            assert layout[window]["messages_per_second"] > 0, (name, window)
            assert len(layout[window]["rounds"]) == 1, (name, window)
        for ratio in ("filled_vs_empty", "filled_vs_empty_before_fill", "filled_vs_emptied_at_end"):
            assert layout[ratio] > 0, (name, ratio)
        removal = layout["removal"]
        assert removal["rows"] == 1000, name
        assert removal["rows_left_behind"] == 0, name
        assert removal["deliveries_left_behind"] == 0, name
        for window in ("load_before", "load_during", "load_after"):
            assert removal[window]["p99_ms"] >= removal[window]["p50_ms"], (name, window)
        for sizes in ("sizes_filled", "sizes_after_removal", "sizes_after_vacuum"):
            assert set(layout[sizes]) == {"messages", "message_history", "deliveries"}, name
            assert layout[sizes]["messages"]["total"] > 0, (name, sizes)
    assert report["layouts"]["plain"]["removal"]["batches"] == 1
    # One day of messages and one of their history.
    assert report["layouts"]["partitioned"]["removal"]["partitions"] == 2
    assert set(report["comparison"]["partitioned_vs_plain"]) == {"empty", "filled", "emptied"}
    (left,) = db.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'retention_%'"
    ).fetchone()
    assert left == 0, "the scratch schemas were dropped"


def test_history_cost_quick(tmp_path: Path, database_url: str, db: psycopg.Connection) -> None:
    out = tmp_path / "history.json"
    history_cost.main(
        [
            "--database-url", database_url,
            "--rows", "20000",
            "--seconds", "1",
            "--rounds", "1",
            "--concurrency", "4",
            "--out", str(out),
        ]
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["fill"]["rows"] == 20_000
    # One round, empty first (the next would put full first).
    assert [r["order"] for r in report["rounds"]] == [["empty", "full"]]
    for number, measured in enumerate(report["rounds"], 1):
        for side in ("empty", "full"):
            assert measured[side]["messages"] > 0, (number, side)
            assert measured[side]["p99_ms"] >= measured[side]["p50_ms"] > 0, (number, side)
        assert measured["full_vs_empty"] == pytest.approx(
            measured["full"]["messages_per_second"] / measured["empty"]["messages_per_second"],
            abs=0.002,
        )
    summary = report["summary"]
    assert summary["full_vs_empty"]["min"] <= summary["full_vs_empty"]["median"]
    assert summary["passed"] == (summary["full_vs_empty"]["median"] >= 0.9)
    tables = report["tables_at_end"]
    # The filled history is still there (nothing past its retention) beside the load's.
    assert tables["full"]["messages"]["bytes"] > tables["empty"]["messages"]["bytes"]
    assert tables["full"]["messages"]["rows_estimate"] >= 20_000
    assert tables["full"]["message_history"]["rows_estimate"] >= 40_000
    (left,) = db.execute(
        "SELECT count(*) FROM pg_database WHERE datname LIKE 'history_%'"
    ).fetchone()
    assert left == 0, "its two databases were dropped"


def test_steady_quick(tmp_path: Path) -> None:
    out = tmp_path / "steady.json"
    # As users run it: its own embedded PostgreSQL, its own server.
    subprocess.run(
        [sys.executable, "-m", "bench.steady", "--quick", "--out", str(out)],
        cwd=REPOSITORY,
        check=True,
        timeout=300,
    )
    report = json.loads(out.read_text())
    windows = report["windows"]
    assert len(windows) >= 6
    steady = [w for w in windows if w["steady"]]
    assert 3 <= len(steady) < len(windows), "the windows before retention started are left out"
    for w in windows:
        assert w["p99_ms"] >= w["p50_ms"] >= 0
        assert w["load_average"] >= 0
        assert set(w["consumed_per_second"]) == set(CONSUMER_GROUPS)
        assert set(w["tables"]) == {
            "messages", "message_history", "deliveries", "dead_letters", "check_requests"
        }  # fmt: skip
        assert w["rows"] == sum(t["rows"] for t in w["tables"].values())
        assert w["bytes"] == sum(t["bytes"] for t in w["tables"].values())
    comparison = report["comparison"]
    figures = {"bytes", "rows", "p50_ms", "messages_per_second"}
    assert set(comparison["last_vs_first"]) == set(comparison["pass"]) == figures
    assert comparison["passed"] == all(comparison["pass"].values())
    first, last = comparison["windows"]["first"], comparison["windows"]["last"]
    assert len(first) == len(last) >= 1 and max(first) < min(last)
    totals = report["totals"]
    assert totals["committed"] < totals["messages"], "some transactions were rolled back"
    # Both groups consumed, and retention removed messages during the run.
    assert all(n > 0 for n in totals["consumed"].values())
    assert totals["retention_removed"]["messages"] > 0
    # Every process it started is gone: its server and its PostgreSQL.
    assert set(report["processes"]) == {"coordinator", "postgres"}
    # Its own server's autovacuum comes every sixth of the (compressed) lifetime.
    assert report["settings"]["autovacuum_naptime_seconds"] == 1
    assert report["processes_left_running"] == []
    assert live_processes(report["processes"].values()) == []


def test_grpc_door_cpu_quick() -> None:
    command = ["bench.grpc_door_cpu", "--json", "--messages", "300", "--rounds", "1"]
    answer = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(answer.stdout)
    assert report["messages"] == 300
    spent = report["door_us_per_message"]
    assert set(spent) == {"access log on", "access log off"}
    assert all(value > 0 for value in spent.values())
    # Every message went through both handlers, answered OK (the run stops on any
    # other answer), and only the variant with the access log wrote its lines.
    written = report["access_log_bytes_per_message"]
    assert written["access log off"] == 0
    assert written["access log on"] > 2 * len('{"rpc": "SendMessage"}')
