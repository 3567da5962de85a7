"""Scraping a live coordinator's /metrics as Prometheus would, parsed by prometheus_client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


def labels(**values: str) -> Labels:
    return frozenset(values.items())


@dataclass(frozen=True)
class Scrape:
    """One scrape: every sample by (sample name, labels), and each family's type."""

    samples: Mapping[tuple[str, Labels], float]
    types: Mapping[str, str]  # family name (counters without _total) -> type

    def value(self, name: str, **label_values: str) -> float:
        """A sample's value; 0 for a series not (yet) exposed."""
        return self.samples.get((name, labels(**label_values)), 0.0)

    def series(self, name: str) -> dict[Labels, float]:
        """Every series of one sample name, by labels."""
        return {key[1]: value for key, value in self.samples.items() if key[0] == name}

    def names(self) -> set[str]:
        """The metric names as one writes them in a query: counters with `_total`."""
        return {
            f"{family}_total" if kind == "counter" else family
            for family, kind in self.types.items()
        }


def scrape(url: str, token: str | None = None) -> Scrape:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    samples: dict[tuple[str, Labels], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(response.text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return Scrape(samples, types)


def delta(before: Scrape, after: Scrape, name: str, **label_values: str) -> float:
    return after.value(name, **label_values) - before.value(name, **label_values)
