"""Message ids belong to their producer group: no squatting, no probing, no owner named.

A message id is unique within its producer group (a message sent without
one: within its topic). Through a served coordinator, over HTTP and the
RocketMQ gRPC door, a token of one group can neither take an id another
group uses later, nor learn which ids another group uses: sends answer as
for a fresh id, lookups answer "not found" in the words of a missing
message, and a refused end does not name the owning group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from coordinator.config import Settings
from tests.grpc_door import OK, GrpcDoor, code, end_request, grpc_door, message, resource

GROUP, TOPIC = "order-producers", "orders"
RIVALS, RIVAL_TOPIC = "payment-producers", "payments"


@pytest.fixture
def tokens(issue_token: Callable[..., str]) -> dict[str, str]:
    # On the gRPC door a topic is its own producer group: each token holds both.
    return {
        "producer": issue_token(
            "producer", produce_topics=(TOPIC,), producer_groups=(GROUP, TOPIC)
        ),
        "rival": issue_token(
            "rival", produce_topics=(RIVAL_TOPIC,), producer_groups=(RIVALS, RIVAL_TOPIC)
        ),
        "admin": issue_token("admin", admin=True),
    }


@pytest.fixture
def door(database_url: str, tokens: dict[str, str]) -> Iterator[GrpcDoor]:
    with grpc_door(database_url, Settings(database_url=None), token=tokens["producer"]) as door:
        yield door


@pytest.fixture
def http(door: GrpcDoor, tokens: dict[str, str]) -> Iterator[Callable[..., httpx.Client]]:
    clients: list[httpx.Client] = []

    def as_(name: str) -> httpx.Client:
        client = httpx.Client(
            base_url=door.server.url,
            timeout=30,
            headers={"authorization": f"Bearer {tokens[name]}"},
        )
        clients.append(client)
        return client

    try:
        yield as_
    finally:
        for client in clients:
            client.close()


def _half(group: str, topic: str, message_id: str, body: str = "order 1001") -> dict:
    return {"topic": topic, "producer_group": group, "message_id": message_id, "body_text": body}


def _created(response: httpx.Response) -> dict:
    assert response.status_code == 201, response.text
    return response.json()


def test_http_a_group_cannot_squat_or_probe_another_groups_ids(
    http: Callable[..., httpx.Client],
) -> None:
    producer, rival, admin = http("producer"), http("rival"), http("admin")

    # Squatting: the rival takes the id first; the owner's later send still succeeds.
    squatted = _created(rival.post("/v1/transactions", json=_half(RIVALS, RIVAL_TOPIC, "ORD-1")))
    own = _created(producer.post("/v1/transactions", json=_half(GROUP, TOPIC, "ORD-1")))
    assert own["created"] is True and own["offset"] != squatted["offset"]
    # ... and its retry is still answered with its own message.
    again = producer.post("/v1/transactions", json=_half(GROUP, TOPIC, "ORD-1"))
    assert again.status_code == 200, again.text  # a retry's answer
    assert (again.json()["created"], again.json()["offset"]) == (False, own["offset"])

    # Probing: an id another group (or topic) uses answers like a fresh one.
    _created(
        producer.post("/v1/messages", json={"topic": TOPIC, "message_id": "N-7", "body_text": "x"})
    )
    for probe in ("ORD-1", "N-7", "NEVER-USED"):
        normal = {"topic": RIVAL_TOPIC, "message_id": probe, "body_text": "probe"}
        assert _created(rival.post("/v1/messages", json=normal))["created"] is True
        grouped = _half(RIVALS, RIVAL_TOPIC, f"{probe}-g", body="probe")
        assert _created(rival.post("/v1/transactions", json=grouped))["created"] is True

    # Each group reads its own message by the shared id; the admin must say which.
    assert producer.get("/v1/messages/ORD-1").json()["offset"] == own["offset"]
    assert rival.get("/v1/messages/ORD-1").json()["offset"] == squatted["offset"]
    ambiguous = admin.get("/v1/messages/ORD-1")
    assert ambiguous.status_code == 400, ambiguous.text
    assert ambiguous.json()["error"] == "ambiguous_message_id"
    assert repr(GROUP) in ambiguous.json()["message"]
    assert "producer_group" not in ambiguous.json()  # a sentence, not a listing field
    picked = admin.get("/v1/messages/ORD-1", params={"producer_group": GROUP})
    assert picked.json()["offset"] == own["offset"]
    by_topic = admin.get("/v1/messages/N-7", params={"topic": RIVAL_TOPIC})
    assert by_topic.status_code == 200 and by_topic.json()["body_text"] == "probe"


def test_http_another_groups_message_is_not_found_in_the_words_of_a_missing_one(
    http: Callable[..., httpx.Client],
) -> None:
    producer, rival = http("producer"), http("rival")
    sent = _created(producer.post("/v1/transactions", json=_half(GROUP, TOPIC, "SECRET-1")))

    lookups = [
        ("/v1/messages/SECRET-1", "/v1/messages/NO-SUCH-1", "SECRET-1", "NO-SUCH-1"),
        (
            f"/v1/transactions/{sent['transaction_id']}",
            "/v1/transactions/no-such-transaction",
            sent["transaction_id"],
            "no-such-transaction",
        ),
        (
            f"/v1/offsets/{sent['offset']}",
            f"/v1/offsets/{sent['offset'] + 1000}",
            str(sent["offset"]),
            str(sent["offset"] + 1000),
        ),
    ]
    for hidden_path, missing_path, hidden_id, missing_id in lookups:
        hidden, missing = rival.get(hidden_path), rival.get(missing_path)
        assert (hidden.status_code, missing.status_code) == (404, 404), hidden.text
        assert hidden.json()["error"] == missing.json()["error"] == "not_found"
        assert hidden.json()["message"] == missing.json()["message"].replace(missing_id, hidden_id)
        assert producer.get(hidden_path).status_code == 200
    narrowed = rival.get("/v1/messages/SECRET-1", params={"producer_group": GROUP})
    assert narrowed.status_code == 404
    assert narrowed.json()["message"] == "no message with message id 'SECRET-1'"

    # An end naming the rival's own group: refused, without naming the owner.
    path = f"/v1/transactions/{sent['transaction_id']}/end"
    wrong = rival.post(path, json={"producer_group": RIVALS, "resolution": "commit"})
    assert wrong.status_code == 409 and wrong.json()["error"] == "producer_group_mismatch"
    assert GROUP not in wrong.json()["message"] and repr(RIVALS) in wrong.json()["message"]


def test_grpc_a_topic_cannot_squat_or_probe_another_topics_ids(
    door: GrpcDoor, tokens: dict[str, str]
) -> None:
    rival = GrpcDoor(door.server, door.port, tokens["rival"])
    try:
        for kind in (d.NORMAL, d.TRANSACTION):
            taken = rival.send(message(RIVAL_TOPIC, b"first", kind=kind, message_id=f"X{kind}"))
            assert taken.status.code == OK, taken.status.message
            # The owner's later send of that id is stored, not refused as a reuse.
            own = door.send(message(TOPIC, b"mine", kind=kind, message_id=f"X{kind}"))
            assert own.status.code == OK, own.status.message
            assert own.entries[0].offset != taken.entries[0].offset

        # Probing with ids the owner uses: answered as fresh ids are.
        owned = door.send(message(TOPIC, b"owned", kind=d.TRANSACTION, message_id="OWNED"))
        assert owned.status.code == OK
        for probe in ("OWNED", "NEVER-USED"):
            for kind in (d.NORMAL, d.TRANSACTION):
                answer = rival.send(message(RIVAL_TOPIC, b"probe", kind=kind, message_id=probe))
                assert answer.status.code == OK, answer.status.message

        # Ending the owner's transaction as the rival's topic: refused, owner unnamed.
        entry = owned.entries[0]
        forged = rival.call("EndTransaction", end_request(RIVAL_TOPIC, entry, d.COMMIT))
        assert forged.status.code == code("PRECONDITION_FAILED")
        assert TOPIC not in forged.status.message.replace(RIVAL_TOPIC, "")
        as_owner = rival.call("EndTransaction", end_request(TOPIC, entry, d.COMMIT))
        assert as_owner.status.code == code("FORBIDDEN")
        mine = door.call(
            "EndTransaction",
            s.EndTransactionRequest(
                topic=resource(TOPIC),
                message_id=entry.message_id,
                transaction_id=entry.transaction_id,
                resolution=d.COMMIT,
            ),
        )
        assert mine.status.code == OK, mine.status.message
    finally:
        rival.channel.close()
