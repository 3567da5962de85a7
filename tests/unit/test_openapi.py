"""What the OpenAPI document says of the answers."""

from __future__ import annotations

from coordinator.http import create_app


def test_metrics_are_declared_as_prometheus_text_not_json() -> None:
    spec = create_app("postgresql://unused@/unused").app.openapi()
    answers = spec["paths"]["/metrics"]["get"]["responses"]
    content_types = set(answers["200"]["content"])
    assert content_types and all(kind.startswith("text/plain") for kind in content_types)
    assert {"401", "403", "429"} <= answers.keys()
