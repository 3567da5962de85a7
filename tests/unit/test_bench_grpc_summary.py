"""The gRPC A/B's arithmetic and the load's settings, without running a load."""

from __future__ import annotations

import argparse

import pytest

from bench.grpc_ab import _summary
from bench.grpc_load import _setting


def _round(pgbench: float, floor: float, base: float, candidate: float) -> dict:
    def load(rate: float, server_us: float) -> dict:
        return {"messages_per_second": rate, "cpu_per_message": {"server_us": server_us}}

    return {
        "baseline": [{"messages_per_second": pgbench}],
        "floor": [load(floor, 700.0)],
        "base": [load(base, 1200.0)],
        "candidate": [load(candidate, 1100.0)],
    }


def test_each_ratio_is_taken_within_its_round_then_summarised_by_the_median() -> None:
    rounds = [
        _round(pgbench=3000, floor=1500, base=750, candidate=900),
        _round(pgbench=2000, floor=1000, base=500, candidate=550),
        _round(pgbench=4000, floor=1600, base=800, candidate=800),
    ]
    (row,) = _summary(rounds, [64])
    assert row["producers"] == 64
    # The floor against pgbench: the ceiling of any door on grpc.aio in this run.
    assert row["floor_vs_baseline"] == {"median": 0.5, "min": 0.4, "max": 0.5}
    assert row["base"]["vs_floor"] == {"median": 0.5, "min": 0.5, "max": 0.5}
    assert row["candidate"]["vs_floor"]["median"] == 0.55
    assert row["candidate"]["vs_baseline"] == {"median": 0.275, "min": 0.2, "max": 0.3}
    assert row["candidate_vs_base"] == {"median": 1.1, "min": 1.0, "max": 1.2}
    assert row["candidate"]["cpu"]["server_us"]["median"] == 1100.0


def test_a_server_setting_is_name_equals_value() -> None:
    assert _setting("group_commit_linger_seconds=0") == ("group_commit_linger_seconds", "0")
    assert _setting("allowed_hosts=a=b") == ("allowed_hosts", "a=b")
    for wrong in ("access_log", "=false", " =1"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
            _setting(wrong)
