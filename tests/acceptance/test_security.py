"""Authentication and permissions through a served coordinator, attack by attack.

Each attack the security issue lists is made with a token that lacks the
permission (401 or 403, with a sentence) and then made good with one that
has it. The tokens exist before the server starts, so it authenticates from
its first request; the tests of tokens created or revoked while it runs
wait, boundedly, for the NOTIFY to reach it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from tests.checkback_helpers import check_settings
from tests.conftest import LiveServer
from tests.factories import GROUP, TOPIC

RIVALS = "payment-producers"
RIVAL_TOPIC = "payments"
CONSUMERS = "billing"
AUDITORS = "audit"
INSTANCE = f"/v1/producers/{GROUP}/instances/producer-a"


@pytest.fixture
def tokens(issue_token: Callable[..., str]) -> dict[str, str]:
    return {
        "producer": issue_token("producer", produce_topics=(TOPIC,), producer_groups=(GROUP,)),
        "rival": issue_token("rival", produce_topics=(RIVAL_TOPIC,), producer_groups=(RIVALS,)),
        "consumer": issue_token("consumer", consume_groups=(CONSUMERS,), consume_topics=(TOPIC,)),
        "auditor": issue_token("auditor", consume_groups=(AUDITORS,), consume_topics=("*",)),
        "admin": issue_token("admin", admin=True),
        "metrics": issue_token("metrics", metrics=True),
    }


@pytest.fixture
def server(database_url: str, settings: Settings, tokens: dict[str, str]) -> Iterator[LiveServer]:
    with LiveServer(database_url, settings) as live:
        yield live


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


class As:
    """The Authorization header of each token by name: `as_["producer"]`."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._tokens = tokens

    def __getitem__(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self._tokens[name]}"}


@pytest.fixture
def as_(tokens: dict[str, str]) -> As:
    return As(tokens)


def refused(response: httpx.Response, status: int, phrase: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] and phrase in body["message"], body


def eventually(probe: Callable[[], bool], what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.05)


def revoke(database_url: str, name: str) -> None:
    async def run() -> None:
        async with Coordinator.connect(database_url) as core:
            await core.tokens.revoke(name)

    asyncio.run(run())


def _prepare(http: httpx.Client, headers: dict[str, str], **fields: object) -> dict:
    body = {"topic": TOPIC, "producer_group": GROUP, "body_text": "order 1001", **fields}
    response = http.post("/v1/transactions", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def _end(group: str, resolution: str = "commit", **fields: object) -> dict[str, object]:
    return {"producer_group": group, "resolution": resolution, **fields}


# --- authentication -------------------------------------------------------------


def test_a_request_without_a_token_is_401_and_health_stays_open(http: httpx.Client) -> None:
    for response in (
        http.get("/v1/offsets/1"),
        http.get("/v1/status"),
        http.get(f"/v1/consumer-groups/{CONSUMERS}/lag"),
        http.get("/metrics"),
        http.post("/v1/messages", json={"topic": TOPIC, "body_text": "x"}),
        http.post(f"/v1/consumer-groups/{CONSUMERS}/receive", json={}),
    ):
        refused(response, 401, "needs a token: send 'Authorization: Bearer <token>'")
    refused(
        http.get("/v1/status", headers={"authorization": "Bearer coord_made-up"}),
        401,
        "the token is not valid",
    )
    refused(http.get("/v1/status", headers={"authorization": "Basic abc"}), 401, "needs a token")
    assert http.get("/health").status_code == 200


def test_an_unauthenticated_request_is_refused_before_its_body_is_looked_at(
    http: httpx.Client,
) -> None:
    text = {"content-type": "text/plain"}
    refused(http.post("/v1/messages", content=b"{}", headers=text), 401, "needs a token")
    subscribe = f"/v1/consumer-groups/{CONSUMERS}/subscriptions/{TOPIC}"
    refused(http.put(subscribe, content=b"{}", headers=text), 401, "needs a token")


def test_a_revoked_token_is_401(http: httpx.Client, as_: As, database_url: str) -> None:
    assert http.get("/metrics", headers=as_["metrics"]).status_code == 200
    revoke(database_url, "metrics")
    eventually(
        lambda: http.get("/metrics", headers=as_["metrics"]).status_code == 401,
        "the revoked token is refused",
    )
    refused(http.get("/metrics", headers=as_["metrics"]), 401, "unknown or revoked")
    assert http.get("/metrics", headers=as_["admin"]).status_code == 200  # the others still work


def test_the_first_token_turns_authentication_on_and_the_last_revoked_off(
    live_server: LiveServer, issue_token: Callable[..., str], database_url: str
) -> None:
    # A loopback server without tokens serves everyone, as it always did.
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        assert http.get("/v1/status").status_code == 200
        token = issue_token("first", admin=True)
        eventually(lambda: http.get("/v1/status").status_code == 401, "tokens are required")
        mine = {"authorization": f"Bearer {token}"}
        assert http.get("/v1/status", headers=mine).status_code == 200
        revoke(database_url, "first")
        eventually(lambda: http.get("/v1/status").status_code == 200, "open again on loopback")


# --- producers ----------------------------------------------------------------


def test_reading_a_message_needs_its_producer_group(http: httpx.Client, as_: As) -> None:
    sent = _prepare(http, as_["producer"])
    lookups = (
        f"/v1/offsets/{sent['offset']}",
        f"/v1/transactions/{sent['transaction_id']}",
        f"/v1/messages/{sent['message_id']}",
    )
    for path in lookups:
        for outsider in ("rival", "consumer", "metrics"):
            # Answered as a missing message is: existence is not told to outsiders.
            refused(http.get(path, headers=as_[outsider]), 404, "no message with")
        for reader in ("producer", "admin"):
            found = http.get(path, headers=as_[reader])
            assert found.status_code == 200, found.text
            assert found.json()["body_text"] == "order 1001"


def test_sending_needs_the_topic_and_the_producer_group(
    http: httpx.Client, as_: As, db: psycopg.Connection
) -> None:
    to_rivals = {"topic": RIVAL_TOPIC, "body_text": "x"}
    refused(http.post("/v1/messages", json=to_rivals, headers=as_["producer"]), 403, "payments")
    as_rivals = {"topic": TOPIC, "producer_group": RIVALS, "body_text": "x"}
    refused(
        http.post("/v1/transactions", json=as_rivals, headers=as_["producer"]),
        403,
        f"act for producer group {RIVALS!r}",
    )
    # One forbidden message refuses the whole batch, before anything is stored.
    batch = {"messages": [{"topic": TOPIC, "body_text": "ok"}, to_rivals]}
    refused(http.post("/v1/messages/batch", json=batch, headers=as_["producer"]), 403, "payments")
    refused(
        http.post("/v1/transactions/batch", json={"messages": [as_rivals]}, headers=as_["rival"]),
        403,
        f"send to topic {TOPIC!r}",
    )
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (0,)

    batch = {"messages": [{"topic": TOPIC, "body_text": "ok"}] * 2}
    assert http.post("/v1/messages/batch", json=batch, headers=as_["producer"]).status_code == 200
    assert http.post("/v1/messages/batch", json=batch, headers=as_["admin"]).status_code == 200


def test_an_end_naming_another_producer_group_is_403(http: httpx.Client, as_: As) -> None:
    sent = _prepare(http, as_["producer"])
    path = f"/v1/transactions/{sent['transaction_id']}/end"
    refused(
        http.post(path, json=_end(GROUP), headers=as_["rival"]),
        403,
        f"token 'rival' may not act for producer group {GROUP!r}",
    )
    # Naming its own group instead gets it nowhere: the message is not that group's.
    refused(http.post(path, json=_end(RIVALS), headers=as_["rival"]), 409, "producer group")
    ended = http.post(path, json=_end(GROUP), headers=as_["producer"])
    assert ended.status_code == 200 and ended.json()["state"] == "committed"


def test_an_end_batch_naming_another_producer_group_is_refused_whole(
    http: httpx.Client, as_: As
) -> None:
    theirs = _prepare(http, as_["producer"])
    own = _prepare(http, as_["rival"], topic=RIVAL_TOPIC, producer_group=RIVALS)
    batch = {
        "requests": [
            {"transaction_id": own["transaction_id"], **_end(RIVALS)},
            {"transaction_id": theirs["transaction_id"], **_end(GROUP)},
        ]
    }
    refused(
        http.post("/v1/transactions/end-batch", json=batch, headers=as_["rival"]),
        403,
        f"act for producer group {GROUP!r}",
    )
    for sent in (own, theirs):  # neither was ended
        found = http.get(f"/v1/offsets/{sent['offset']}", headers=as_["admin"])
        assert found.json()["state"] == "prepared"

    ended = http.post("/v1/transactions/end-batch", json=batch, headers=as_["admin"])
    assert ended.status_code == 200
    assert [result["ok"] for result in ended.json()["results"]] == [True, True]


def test_another_groups_check_backs_can_be_neither_polled_nor_answered(
    database_url: str, tokens: dict[str, str], as_: As
) -> None:
    settings = check_settings(
        check_scheduler_enabled=True,
        check_scan_interval_seconds=0.1,
        transaction_timeout_seconds=0.3,
        check_interval_seconds=1.0,
    )
    with (
        LiveServer(database_url, settings) as server,
        httpx.Client(base_url=server.url, timeout=40) as http,
    ):
        checks = INSTANCE + "/checks"
        refused(
            http.get(checks, params={"wait_seconds": 5}, headers=as_["rival"]),
            403,
            f"act for producer group {GROUP!r}",
        )
        refused(http.get(checks, headers=as_["consumer"]), 403, "producer group")
        assert http.post(INSTANCE + "/heartbeat", json={}, headers=as_["producer"]).is_success
        sent = _prepare(http, as_["producer"])

        polled = http.get(checks, params={"wait_seconds": 30}, headers=as_["producer"])
        assert polled.status_code == 200, polled.text
        (check,) = polled.json()["checks"]
        assert check["transaction_id"] == sent["transaction_id"]

        answer = f"/v1/transactions/{sent['transaction_id']}/end"
        forged = _end(GROUP, "rollback", from_check=True)
        refused(http.post(answer, json=forged, headers=as_["rival"]), 403, repr(GROUP))
        answered = http.post(answer, json=forged, headers=as_["producer"])
        assert answered.status_code == 200 and answered.json()["state"] == "rolled_back"


def test_another_groups_producers_can_be_neither_listed_nor_deregistered(
    http: httpx.Client, as_: As
) -> None:
    registered = http.post(INSTANCE + "/heartbeat", json={}, headers=as_["producer"])
    assert registered.status_code == 200
    refused(http.post(INSTANCE + "/heartbeat", json={}, headers=as_["rival"]), 403, repr(GROUP))
    refused(http.delete(INSTANCE, headers=as_["rival"]), 403, f"act for producer group {GROUP!r}")

    def listed(who: str, **params: str) -> httpx.Response:
        return http.get("/v1/producers", params=params, headers=as_[who])

    refused(listed("producer"), 403, "list the producers of every group")
    refused(listed("rival", producer_group=GROUP), 403, repr(GROUP))
    (still_there,) = listed("producer", producer_group=GROUP).json()["producers"]
    assert still_there["instance_id"] == "producer-a"
    assert len(listed("admin").json()["producers"]) == 1

    assert http.delete(INSTANCE, headers=as_["producer"]).status_code == 204
    assert listed("admin").json() == {"producers": [], "check_sources": []}


# --- consumers ------------------------------------------------------------------


def _group(group: str) -> str:
    return f"/v1/consumer-groups/{group}"


def test_another_groups_subscriptions_can_be_neither_changed_nor_deleted(
    http: httpx.Client, as_: As
) -> None:
    mine = _group(CONSUMERS) + f"/subscriptions/{TOPIC}"
    refused(http.put(mine, json={}, headers=as_["auditor"]), 403, f"group {CONSUMERS!r}")
    refused(
        http.put(_group(CONSUMERS) + "/subscriptions/payments", json={}, headers=as_["consumer"]),
        403,
        "may not consume topic 'payments'",
    )
    assert http.put(mine, json={}, headers=as_["consumer"]).status_code == 201

    refused(http.delete(mine, headers=as_["auditor"]), 403, f"group {CONSUMERS!r}")
    refused(http.delete(mine, headers=as_["producer"]), 403, "consume as consumer group")
    refused(http.get(_group(CONSUMERS) + "/subscriptions", headers=as_["auditor"]), 403, "billing")
    listed = http.get(_group(CONSUMERS) + "/subscriptions", headers=as_["admin"])
    assert [s["topic"] for s in listed.json()["subscriptions"]] == [TOPIC]

    assert http.delete(mine, headers=as_["consumer"]).status_code == 200


def test_receipt_handles_work_only_for_their_consumer_group(http: httpx.Client, as_: As) -> None:
    for group, who in ((CONSUMERS, "consumer"), (AUDITORS, "auditor")):
        subscribed = http.put(_group(group) + f"/subscriptions/{TOPIC}", json={}, headers=as_[who])
        assert subscribed.status_code == 201
    normal = {"topic": TOPIC, "body_text": "x"}
    assert http.post("/v1/messages", json=normal, headers=as_["producer"]).status_code == 201

    refused(
        http.post(_group(CONSUMERS) + "/receive", json={}, headers=as_["auditor"]), 403, "billing"
    )
    received = http.post(_group(CONSUMERS) + "/receive", json={}, headers=as_["consumer"])
    (message,) = received.json()["messages"]
    handle = message["receipt_handle"]

    # Through the billing path without the billing group's permission: 403.
    for path, body in (
        ("/ack", {"receipt_handle": handle}),
        ("/ack/batch", {"receipt_handles": [handle]}),
        ("/change-invisible-duration", {"receipt_handle": handle, "invisible_seconds": 5}),
    ):
        refused(
            http.post(_group(CONSUMERS) + path, json=body, headers=as_["auditor"]),
            403,
            f"token 'auditor' may not consume as consumer group {CONSUMERS!r}",
        )
    # Through its own group's path: the handle is not one of that group's.
    by_handle = {"receipt_handle": handle}
    refused(
        http.post(_group(AUDITORS) + "/ack", json=by_handle, headers=as_["auditor"]),
        404,
        f"consumer group {AUDITORS!r} has no unacked message with receipt handle",
    )
    refused(
        http.post(
            _group(AUDITORS) + "/change-invisible-duration",
            json={"receipt_handle": handle, "invisible_seconds": 5},
            headers=as_["auditor"],
        ),
        404,
        "has no unacked message",
    )
    batch = http.post(
        _group(AUDITORS) + "/ack/batch", json={"receipt_handles": [handle]}, headers=as_["auditor"]
    )
    assert batch.json()["results"][0]["outcome"] == "not_found"

    acked = http.post(_group(CONSUMERS) + "/ack", json=by_handle, headers=as_["consumer"])
    assert acked.status_code == 200 and acked.json()["outcome"] == "acked"


def test_receive_lag_and_dead_letters_need_the_group_and_requeue_needs_admin(
    http: httpx.Client, as_: As
) -> None:
    assert http.put(
        _group(CONSUMERS) + f"/subscriptions/{TOPIC}", json={}, headers=as_["consumer"]
    ).is_success
    receive = _group(CONSUMERS) + "/receive"
    refused(
        http.post(receive, json={"topic": "payments"}, headers=as_["consumer"]),
        403,
        "may not consume topic 'payments'",
    )
    assert http.post(receive, json={"topic": TOPIC}, headers=as_["consumer"]).is_success
    for path in ("/lag", "/dead-letters"):
        refused(http.get(_group(CONSUMERS) + path, headers=as_["auditor"]), 403, "billing")
        assert http.get(_group(CONSUMERS) + path, headers=as_["consumer"]).status_code == 200
    for path in ("/dead-letters/requeue", "/dead-letters/7/requeue"):
        refused(
            http.post(_group(CONSUMERS) + path, headers=as_["consumer"]),
            403,
            "may not requeue dead letters (needs the admin permission)",
        )
    requeued = http.post(_group(CONSUMERS) + "/dead-letters/requeue", headers=as_["admin"])
    assert requeued.status_code == 200 and requeued.json() == {"requeued": 0}
    refused(
        http.post(_group(CONSUMERS) + "/dead-letters/7/requeue", headers=as_["admin"]),
        404,
        "no dead letter 7",
    )


# --- operators and metrics ------------------------------------------------------


def test_status_needs_admin(http: httpx.Client, as_: As) -> None:
    for who in ("producer", "consumer", "metrics"):
        refused(http.get("/v1/status", headers=as_[who]), 403, "needs the admin permission")
    assert http.get("/v1/status", headers=as_["admin"]).status_code == 200


def test_metrics_need_the_metrics_permission(http: httpx.Client, as_: As) -> None:
    refused(http.get("/metrics"), 401, "needs a token")
    refused(http.get("/metrics", headers=as_["producer"]), 403, "needs the metrics permission")
    for who in ("metrics", "admin"):
        scraped = http.get("/metrics", headers=as_[who])
        assert scraped.status_code == 200 and "coordinator_" in scraped.text


def test_metrics_open_serves_metrics_without_a_token(
    database_url: str, tokens: dict[str, str]
) -> None:
    with (
        LiveServer(database_url, Settings(metrics_open=True)) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.get("/metrics").status_code == 200
        refused(http.get("/v1/status"), 401, "needs a token")  # only /metrics is opened


def test_openapi_documents_bearer_tokens(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert [scheme["scheme"] for scheme in schemes.values()] == ["bearer"]
    operation = document["paths"]["/v1/transactions"]["post"]
    assert operation["security"] and {"401", "403", "415", "429"} <= operation["responses"].keys()


# --- bodies that are not JSON ---------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_sent_as_json_is_415(
    http: httpx.Client, as_: As, content_type: str | None, db: psycopg.Connection
) -> None:
    def post(path: str, who: str, method: str = "POST") -> None:
        headers = {**as_[who], **({"content-type": content_type} if content_type else {})}
        body = b'{"topic": "orders", "producer_group": "order-producers", "body_text": "x"}'
        response = http.request(method, path, content=body, headers=headers)
        refused(response, 415, "the request body must be JSON, sent with 'Content-Type: app")
        assert (content_type or "no content type") in response.json()["message"]

    post("/v1/messages", "producer")
    post("/v1/transactions", "producer")
    post("/v1/transactions/batch", "producer")
    post("/v1/transactions/some-tx/end", "producer")
    post(_group(CONSUMERS) + f"/subscriptions/{TOPIC}", "consumer", method="PUT")
    post(_group(CONSUMERS) + "/receive", "consumer")
    post(_group(CONSUMERS) + "/ack", "consumer")
    post(_group(CONSUMERS) + "/dead-letters/requeue", "admin")
    post(INSTANCE + "/heartbeat", "producer")
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM subscriptions").fetchone() == (0,)


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "application/x+json"]
)
def test_json_bodies_are_taken_with_any_json_media_type(
    http: httpx.Client, as_: As, content_type: str
) -> None:
    body = b'{"topic": "orders", "body_text": "x"}'
    headers = {**as_["producer"], "content-type": content_type}
    sent = http.post("/v1/messages", content=body, headers=headers)
    assert sent.status_code == 201, sent.text
    headers = {**as_["consumer"], "content-type": content_type}
    subscribe = _group(CONSUMERS) + f"/subscriptions/{TOPIC}"
    subscribed = http.put(subscribe, content=b"{}", headers=headers)
    assert subscribed.status_code == 201, subscribed.text


# --- limits ---------------------------------------------------------------------


def test_a_token_over_its_rate_gets_429(database_url: str, tokens: dict[str, str], as_: As) -> None:
    settings = Settings(rate_limit_per_second=1, rate_limit_burst=2)
    with (
        LiveServer(database_url, settings) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        lag = _group(CONSUMERS) + "/lag"
        answers = [http.get(lag, headers=as_["consumer"]) for _ in range(6)]
        statuses = [answer.status_code for answer in answers]
        # The burst, then (the bucket refilling one a second) 429 within a few more.
        assert statuses[:2] == [200, 200] and 429 in statuses, statuses
        refused(answers[statuses.index(429)], 429, "token 'consumer' is over its rate")
        # Each token has its own bucket.
        assert http.get(lag, headers=as_["admin"]).status_code == 200


def test_a_token_holding_too_many_long_polls_gets_429(
    database_url: str, issue_token: Callable[..., str]
) -> None:
    both = issue_token(
        "both",
        produce_topics=(TOPIC,),
        producer_groups=(GROUP,),
        consume_groups=(CONSUMERS,),
        consume_topics=(TOPIC,),
    )
    other = issue_token("other", producer_groups=(GROUP,), produce_topics=(TOPIC,))
    as_both = {"authorization": f"Bearer {both}"}
    settings = Settings(max_long_polls_per_token=1)
    with (
        LiveServer(database_url, settings) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
        httpx.Client(base_url=server.url, timeout=30) as holder,
        ThreadPoolExecutor(1) as pool,
    ):
        held = pool.submit(
            holder.get, INSTANCE + "/checks", params={"wait_seconds": 3}, headers=as_both
        )
        # The poll registers its instance once it holds its place.
        eventually(
            lambda: http.get(
                "/v1/producers", params={"producer_group": GROUP}, headers=as_both
            ).json()["producers"],
            "the first long poll is waiting",
        )
        second = f"/v1/producers/{GROUP}/instances/producer-b/checks"
        refused(
            http.get(second, params={"wait_seconds": 1}, headers=as_both),
            429,
            "token 'both' holds 1 long polls already",
        )
        receive = _group(CONSUMERS) + "/receive"
        refused(http.post(receive, json={"wait_seconds": 1}, headers=as_both), 429, "long polls")
        # Not long polls, and other tokens' long polls, are not counted.
        assert http.get(second, params={"wait_seconds": 0}, headers=as_both).status_code == 200
        as_other = {"authorization": f"Bearer {other}"}
        assert http.get(second, params={"wait_seconds": 0.1}, headers=as_other).status_code == 200

        assert held.result().status_code == 200
        assert http.get(second, params={"wait_seconds": 0.1}, headers=as_both).status_code == 200


def test_the_long_poll_ceiling_is_a_setting(database_url: str) -> None:
    with (
        LiveServer(database_url, Settings(max_long_poll_seconds=2)) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.put(_group(CONSUMERS) + f"/subscriptions/{TOPIC}", json={}).status_code == 201
        receive = _group(CONSUMERS) + "/receive"
        refused(http.post(receive, json={"wait_seconds": 5}), 400, "at most 2 seconds")
        assert http.post(receive, json={"wait_seconds": 0.2}).status_code == 200
        checks = INSTANCE + "/checks"
        refused(http.get(checks, params={"wait_seconds": 5}), 400, "between 0 and 2")
        assert http.get(checks, params={"wait_seconds": 61}).status_code == 422  # the protocol's
        assert http.get(checks, params={"wait_seconds": 0.2}).status_code == 200
