"""Check-back pieces that need no database: signatures, check URLs, push answers, settings."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime

import httpx
import pytest

from coordinator.config import Settings
from coordinator.core.checkback import push
from coordinator.core.checkback.push import _answer, encode, forbidden_among, headers_for
from coordinator.core.checkback.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, verify
from coordinator.db.queries import all_queries
from coordinator.domain.check_urls import check_url, forbidden_address
from coordinator.domain.checkback import CheckRequest
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.states import Resolution
from tests.checkback_helpers import pushed_check_request

BODY = b'{"offset":1}'
NOW = 1_767_225_600  # 2026-01-01T00:00:00Z
SENT_AT = str(NOW)


def _signature(body: bytes, secret: str, timestamp: str) -> str:
    """The scheme written out independently of `sign`: HMAC-SHA256 over "<ts>.<body>"."""
    content = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), content, hashlib.sha256).hexdigest()


def test_the_signature_is_hmac_sha256_of_the_timestamp_and_the_raw_body() -> None:
    expected = _signature(BODY, "secret", SENT_AT)
    assert sign(BODY, "secret", NOW) == sign(BODY, "secret", SENT_AT) == expected
    assert verify(BODY, "secret", expected, SENT_AT, now=NOW)
    assert not verify(BODY + b" ", "secret", expected, SENT_AT, now=NOW)
    assert not verify(BODY, "other", expected, SENT_AT, now=NOW)
    # the prefix is part of the header
    assert not verify(BODY, "secret", expected.removeprefix("sha256="), SENT_AT, now=NOW)
    assert not verify(BODY, "secret", None, SENT_AT, now=NOW)


def test_a_valid_signature_verifies() -> None:
    assert verify(BODY, "secret", sign(BODY, "secret", SENT_AT), SENT_AT, now=NOW + 10)
    # against the real clock, as a producer calls it
    fresh = str(int(time.time()))
    assert verify(BODY, "secret", sign(BODY, "secret", fresh), fresh)


def test_a_tampered_body_does_not_verify() -> None:
    signature = sign(BODY, "secret", SENT_AT)
    assert not verify(b'{"offset":2}', "secret", signature, SENT_AT, now=NOW)
    assert not verify(BODY + b"\n", "secret", signature, SENT_AT, now=NOW)


def test_another_secret_does_not_verify() -> None:
    assert not verify(BODY, "other", sign(BODY, "secret", SENT_AT), SENT_AT, now=NOW)


def test_the_timestamp_is_covered_by_the_signature() -> None:
    # a captured request with a fresh timestamp header pasted on does not pass
    signature = sign(BODY, "secret", SENT_AT)
    later = str(NOW + 3600)
    assert not verify(BODY, "secret", signature, later, now=NOW + 3600)


def test_an_old_timestamp_is_a_replay() -> None:
    signature = sign(BODY, "secret", SENT_AT)
    assert verify(BODY, "secret", signature, SENT_AT, now=NOW + 300)  # the edge of the window
    assert not verify(BODY, "secret", signature, SENT_AT, now=NOW + 301)
    assert not verify(BODY, "secret", signature, SENT_AT, now=NOW + 86_400)
    assert not verify(BODY, "secret", signature, SENT_AT, max_age_seconds=30, now=NOW + 31)
    assert verify(BODY, "secret", signature, SENT_AT, max_age_seconds=600, now=NOW + 301)


def test_a_future_timestamp_is_refused() -> None:
    signature = sign(BODY, "secret", SENT_AT)
    assert verify(BODY, "secret", signature, SENT_AT, now=NOW - 300)
    assert not verify(BODY, "secret", signature, SENT_AT, now=NOW - 301)
    assert not verify(BODY, "secret", signature, SENT_AT, max_age_seconds=5, now=NOW - 6)


@pytest.mark.parametrize(
    "timestamp",
    [
        None,
        "",
        "soon",
        "-1767225600",
        "+1767225600",
        " 1767225600",
        "1767225600 ",
        "1767225600.0",
        "1_767_225_600",
        "\u0661\u0667\u0666\u0667",  # digits of another script: int() takes them
        "9" * 40,
    ],
)
def test_a_missing_or_garbled_timestamp_is_refused(timestamp: str | None) -> None:
    # signed over the garbled text, so only the timestamp check can refuse it
    signature = sign(BODY, "secret", timestamp or "")
    assert not verify(BODY, "secret", signature, timestamp, now=NOW)


@pytest.mark.parametrize("signature", [None, "", "sha256=", "sha1=00", "sha256=\u00e9\u00e9"])
def test_a_garbled_signature_is_refused(signature: str | None) -> None:
    assert not verify(BODY, "secret", signature, SENT_AT, now=NOW)


def test_push_headers_sign_only_with_a_secret() -> None:
    assert SIGNATURE_HEADER not in headers_for(b"{}", None)
    assert TIMESTAMP_HEADER not in headers_for(b"{}", None)
    signed = headers_for(b"{}", "k", timestamp=NOW)
    assert signed[TIMESTAMP_HEADER] == SENT_AT
    assert signed[SIGNATURE_HEADER] == sign(b"{}", "k", NOW)
    assert signed["content-type"] == "application/json"


def test_push_headers_are_stamped_now_and_verify() -> None:
    signed = headers_for(BODY, "k")
    assert abs(int(signed[TIMESTAMP_HEADER]) - time.time()) < 5
    assert verify(BODY, "k", signed[SIGNATURE_HEADER], signed[TIMESTAMP_HEADER])


# --- Check URLs: addresses the coordinator never calls --------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("169.254.169.254", "link-local"),  # AWS, GCP, Azure, OCI metadata
        ("169.254.170.2", "link-local"),  # ECS task metadata
        ("169.254.0.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%lo", "link-local"),
        ("::ffff:169.254.169.254", "link-local"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("not an address", "not an IP address"),
    ],
)
def test_forbidden_addresses(address: str, reason: str) -> None:
    refused = forbidden_address(address)
    assert refused is not None and reason in refused


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.1.1",
        "::1",
        "10.0.0.7",
        "172.16.5.4",
        "192.168.0.7",
        "fd12:3456::1",  # unique local, as private networks use
        "100.64.0.1",  # shared address space, but not the metadata address in it
        "93.184.216.34",
        "2001:db8::1",
    ],
)
def test_loopback_private_and_public_addresses_are_allowed(address: str) -> None:
    assert forbidden_address(address) is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[fe80::1]/x", "link-local"),
        ("http://[fe80::1%25eth0]/x", "link-local"),
        ("http://[::ffff:169.254.169.254]/x", "link-local"),
        ("http://2852039166/x", "link-local"),  # 169.254.169.254 as one number
        ("http://0xa9.0xfe.0xa9.0xfe/x", "link-local"),
        ("http://[fd00:ec2::254]/latest/meta-data", "metadata"),
        ("http://100.100.100.200/latest/meta-data", "metadata"),
        ("http://metadata.google.internal/", "metadata"),
        ("http://METADATA.google.internal./computeMetadata/v1/", "metadata"),
        ("http://metadata/computeMetadata/v1/", "metadata"),
        ("http://instance-data/latest/meta-data", "metadata"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://0.0.0.0:8080/check", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://255.255.255.255/", "broadcast"),
        ("http://u:p@127.0.0.1/", "credentials"),
        ("https://token@producer.example.com/check", "credentials"),
    ],
)
def test_check_urls_the_coordinator_must_not_call_are_refused(url: str, says: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        check_url(url)
    assert says in refused.value.message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/check",
        "http://localhost/check",
        "http://[::1]:9000/check",
        "http://10.0.0.7/check",
        "http://192.168.0.7/check",
        "https://producer.example.com/check",
        "http://order-svc.internal:8080/check",
    ],
)
def test_check_urls_on_the_same_host_or_network_are_allowed(url: str) -> None:
    assert check_url(url) == url


def test_the_first_forbidden_resolved_address_decides() -> None:
    assert forbidden_among([]) is None
    assert forbidden_among(["127.0.0.1", "::1", "10.0.0.7"]) is None
    refused = forbidden_among(["10.0.0.7", "169.254.169.254", "0.0.0.0"])
    assert refused is not None and refused.startswith("169.254.169.254 (link-local")
    # one forbidden address among allowed ones is enough: the client may pick any
    assert forbidden_among(["93.184.216.34", "fd00:ec2::254"]) is not None


def _recording_client(sent: list[httpx.Request]) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"resolution": "commit"})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("url", "address"),
    [
        # registered before the rule, or by a coordinator without it
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("http://[fd00:ec2::254]/latest/meta-data", "fd00:ec2::254"),
        # a host name the system resolver turns into the metadata address
        ("http://2852039166/latest/meta-data", "169.254.169.254"),
    ],
)
async def test_a_push_to_a_forbidden_address_is_not_sent(url: str, address: str) -> None:
    sent: list[httpx.Request] = []
    async with _recording_client(sent) as client:
        outcome = await push.push(client, url, pushed_check_request(), "k")
    assert sent == []
    assert not outcome.delivered and outcome.resolution is None
    assert outcome.detail is not None
    assert outcome.detail.startswith(f"check URL resolves to a forbidden address {address} (")


@pytest.mark.anyio
async def test_a_push_to_a_host_that_does_not_resolve_is_not_sent() -> None:
    sent: list[httpx.Request] = []
    async with _recording_client(sent) as client:
        outcome = await push.push(
            client, "http://producer.invalid/check", pushed_check_request(), "k"
        )
    assert sent == [] and not outcome.delivered
    assert outcome.detail is not None and "does not resolve" in outcome.detail


@pytest.mark.anyio
@pytest.mark.parametrize("url", ["http://localhost:8080/check", "http://127.0.0.1:8080/check"])
async def test_a_push_to_an_allowed_host_is_sent_signed(url: str) -> None:
    sent: list[httpx.Request] = []
    async with _recording_client(sent) as client:
        outcome = await push.push(client, url, pushed_check_request(), "k")
    assert outcome.delivered and outcome.resolution is Resolution.COMMIT
    (request,) = sent
    assert verify(
        request.content,
        "k",
        request.headers[SIGNATURE_HEADER],
        request.headers[TIMESTAMP_HEADER],
    )


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
    outcome = _answer(content)
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
