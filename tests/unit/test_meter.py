"""The meter: metrics on a registry of its own, with buckets that hold the longest long poll."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.states import MessageState, Source
from coordinator.metrics import Meter, process_registry

RESOLVED = "coordinator_transactions_resolved_total"


def _buckets(meter: Meter, histogram: str) -> dict[float, float]:
    """The cumulative bucket counts of a histogram's one series, by upper bound."""
    text = meter.exposition().decode()
    return {
        float(sample.labels["le"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"{histogram}_bucket"
    }


def test_two_meters_in_one_process_count_apart() -> None:
    first, second = Meter(), Meter()
    first.resolved(MessageState.COMMITTED, Source.CLIENT, 0.01)
    labels = {"state": "committed", "source": "client"}
    assert first.registry.get_sample_value(RESOLVED, labels) == 1
    assert second.registry.get_sample_value(RESOLVED, labels) == 0


@pytest.mark.parametrize(
    ("door", "labels", "histogram"),
    [
        ("http", ("GET", "/v1/consumer-groups/{consumer_group}/messages", 200), "http_request"),
        ("grpc", ("ReceiveMessage", "OK"), "grpc_request"),
    ],
)
def test_the_longest_long_poll_lands_in_a_finite_bucket(
    door: str, labels: tuple[object, ...], histogram: str
) -> None:
    meter = Meter()
    # A long poll answers a little after its wait: its own work, the loop's latency.
    getattr(meter, door).observe(labels, len(labels) - 1, LONGEST_POLL_SECONDS + 0.05)
    buckets = _buckets(meter, f"coordinator_{histogram}_duration_seconds")
    finite = [bound for bound, count in buckets.items() if count and not math.isinf(bound)]
    assert finite, buckets


def test_a_serving_meter_shows_the_process_figures_too() -> None:
    names = {
        family.name
        for family in text_string_to_metric_families(
            Meter(process_registry()).exposition().decode()
        )
    }
    assert {"process_cpu_seconds", "python_info", "coordinator_transactions_resolved"} <= names
