"""Check-back pieces that need no database: signatures, push answers, settings."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

import httpx
import pytest

from coordinator.config import Settings
from coordinator.core.checkback.push import _answer, encode, headers_for
from coordinator.core.checkback.signing import SIGNATURE_HEADER, sign, verify
from coordinator.db.queries import all_queries
from coordinator.domain.checkback import CheckRequest
from coordinator.domain.states import Resolution


def test_the_signature_is_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"offset":1}'
    expected = hmac.new(b"secret", body, hashlib.sha256).hexdigest()
    assert sign(body, "secret") == f"sha256={expected}"
    assert verify(body, "secret", f"sha256={expected}")
    assert not verify(body + b" ", "secret", f"sha256={expected}")
    assert not verify(body, "other", f"sha256={expected}")
    assert not verify(body, "secret", expected)  # the prefix is part of the header
    assert not verify(body, "secret", None)


def test_push_headers_sign_only_with_a_secret() -> None:
    assert SIGNATURE_HEADER not in headers_for(b"{}", None)
    signed = headers_for(b"{}", "k")
    assert signed[SIGNATURE_HEADER] == sign(b"{}", "k")
    assert signed["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("content", "delivered", "resolution"),
    [
        (b"", True, None),
        (b"not json", True, None),
        (b'{"resolution": "commit"}', True, Resolution.COMMIT),
        (b'{"resolution": "ROLLBACK"}', True, Resolution.ROLLBACK),
        (b'{"resolution": "unknown"}', True, None),
        (b'{"resolution": "maybe"}', True, None),
        (b'{"other": 1}', True, None),
        (b"[1, 2]", True, None),
    ],
)
def test_push_answers(content: bytes, delivered: bool, resolution: Resolution | None) -> None:
    outcome = _answer(httpx.Response(200, content=content))
    assert (outcome.delivered, outcome.resolution) == (delivered, resolution)


def test_check_back_settings_have_documented_defaults() -> None:
    s = Settings(_env_file=None)
    assert (s.check_scan_interval_seconds, s.check_batch_size, s.max_inflight_dispatches) == (
        1.0,
        200,
        32,
    )
    assert (s.producer_ttl_seconds, s.producer_forget_seconds) == (30.0, 3600.0)
    assert (s.check_backoff, s.check_backoff_factor, s.check_backoff_max_seconds) == (
        False,
        2.0,
        3600.0,
    )
    assert s.check_push_secret is None and s.check_push_timeout_seconds == 5.0
    assert s.check_poll_fallback_seconds == 2.0 and s.check_scheduler_enabled is True


def test_the_push_secret_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDINATOR_CHECK_PUSH_SECRET", "hush")
    s = Settings()
    assert s.check_push_secret is not None
    assert s.check_push_secret.get_secret_value() == "hush"
    assert "hush" not in repr(s)


def test_the_pushed_body_is_the_check_request_json() -> None:
    request = CheckRequest(
        offset=7,
        message_id="M",
        transaction_id="T",
        producer_group="g",
        check_count=2,
        topic="orders",
        tags=None,
        keys=("k",),
        properties={"p": "é"},
        body=b"hi",
        message_group=None,
        born_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert json.loads(encode(request)) == request.to_json()
    assert request.to_json()["body_base64"] == "aGk=" and request.to_json()["body_text"] == "hi"


def test_check_back_queries_are_named() -> None:
    names = set(all_queries())
    for name in (
        "heartbeat_producer",
        "claim_due_checks",
        "take_check_requests",
        "start_pushes",
        "finish_push",
        "operator_recheck",
        "operator_resolve",
    ):
        assert name in names
