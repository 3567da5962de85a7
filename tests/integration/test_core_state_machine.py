"""The core as a state machine: random sequences of everything producers, check-backs,
operators and consumers do, on a real database, against a model (tests/core_model.py).

Each step calls the core as the HTTP door and the CLI do and compares the
answer with the model's prediction; after each step the invariants compare
the whole database with the model and check what must hold whatever the
model says: only documented transitions in the history, the history ending
in the current state, deliveries and dead letters only of committed messages,
never a delivery again after an ack, check requests only of pending messages.

Time is moved in SQL instead of waited for: a check becomes due, a message
passes retention, an invisible duration runs out, a producer goes silent.

Every example gets its own event loop and Coordinator on the test's database,
emptied first. The examples are derandomized (the same on every run);
COORDINATOR_STATEFUL_EXAMPLES=1000 searches further than CI does. The deep
paths the search reaches only now and then are also walked by fixed scripts
(test_scripted_paths_follow_the_model) through the same rules and invariants."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, note
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.checkback import ClaimAction, OperatorResult
from coordinator.domain.delivery import AckOutcome, ConsumerLag
from coordinator.domain.errors import (
    AmbiguousMessageId,
    CoordinatorError,
    NotFound,
    ReceiptHandleStale,
)
from coordinator.domain.messages import EndRequest, EndResult, NewMessage, SendResult, Status
from coordinator.domain.rules import delivery_id_of
from coordinator.domain.states import MessageKind, MessageState, Resolution, Source
from tests.core_model import (
    COMMITTED,
    DOCUMENTED_TRANSITIONS,
    PREPARED,
    Answered,
    CoreModel,
    Draft,
    Message,
    Refused,
    Stored,
    Subscription,
)

T = TypeVar("T")

CORE_SETTINGS = Settings(
    database_url=None,
    # Nothing becomes due or stale by the clock within an example: the test
    # moves the timestamps itself, so the model's predictions are exact.
    transaction_timeout_seconds=3600,
    check_interval_seconds=3600,
    producer_ttl_seconds=600,
    producer_forget_seconds=7200,
    check_max=2,  # small, so discards happen within a few steps
    retention_hours=72,
    check_scheduler_enabled=False,
    pool_min_size=1,
    pool_max_size=4,
)
RETENTION_SECONDS = CORE_SETTINGS.retention_hours * 3600
LONG_INVISIBLE = 600.0  # in flight for the whole example unless the test lets it run out
NACK_INVISIBLE = 0.001  # change-invisible-duration's smallest useful value (0 is refused)

MESSAGE_IDS = tuple(f"m-{i}" for i in range(8))
PRODUCER_GROUPS = ("pg-a", "pg-b")
INSTANCES = ("i-1", "i-2")
TOPICS = ("t1", "t2")
TAGS = (None, "TagA", "TagB")
BODIES = (b"one", b"two")
SUBSCRIPTIONS = (
    # few attempts, so that redeliveries end in the dead letters within an example
    Subscription("cg-all", "t1", "*", None, max_delivery_attempts=2),
    Subscription("cg-all", "t2", "*", None, max_delivery_attempts=2),
    Subscription("cg-tag", "t1", "TagA", frozenset({"TagA"}), max_delivery_attempts=1),
)
CONSUMER_GROUPS = ("cg-all", "cg-tag")

ACK_OUTCOMES = {
    "ok": AckOutcome.ACKED,
    "stale": AckOutcome.STALE,
    "not_found": AckOutcome.NOT_FOUND,
}

PICK = st.integers(min_value=0, max_value=255)  # an index into whatever the rule chooses from


def _drafts(kind: MessageKind) -> st.SearchStrategy[Draft]:
    groups: Sequence[str | None] = PRODUCER_GROUPS
    if kind is MessageKind.NORMAL:
        groups = (*PRODUCER_GROUPS, None)  # a normal message may name no group
    return st.builds(
        Draft,
        message_id=st.sampled_from(MESSAGE_IDS),
        kind=st.just(kind),
        producer_group=st.sampled_from(groups),
        topic=st.sampled_from(TOPICS),
        tags=st.sampled_from(TAGS),
        body=st.sampled_from(BODIES),
    )


HALF_DRAFTS = _drafts(MessageKind.TRANSACTIONAL)
NORMAL_DRAFTS = _drafts(MessageKind.NORMAL)
# Mostly the message's own group and no message id, sometimes the others.
GROUP_CHOICE = st.sampled_from(("own", "own", "own", "other"))
MESSAGE_ID_CHOICE = st.sampled_from((None, None, "own", "other"))

RESET_SQL = """
DELETE FROM dead_letters;
DELETE FROM deliveries;
DELETE FROM check_requests;
DELETE FROM message_history;
DELETE FROM messages;
DELETE FROM subscriptions;
DELETE FROM producers;
"""


def _pick(items: Sequence[T], pick: int) -> T:
    return items[pick % len(items)]


def _new_message(draft: Draft) -> NewMessage:
    return NewMessage(
        topic=draft.topic,
        body=draft.body,
        producer_group=draft.producer_group,
        tags=draft.tags,
        message_id=draft.message_id,
    )


class CoreMachine(RuleBasedStateMachine):
    """Bound to a database by the test (database_url, db) before it runs."""

    database_url: str
    db: psycopg.Connection[Any]

    def __init__(self) -> None:
        super().__init__()
        # Examples share the test's database: each starts from empty tables.
        self.db.execute(RESET_SQL)
        self.model = CoreModel(subscriptions=[], check_max=CORE_SETTINGS.check_max)
        self.taken_checks: list[Message] = []  # check requests handed to instances by polls
        self.runner = asyncio.Runner()
        self.connection = Coordinator.connect(self.database_url, CORE_SETTINGS)
        try:
            self.core = self.run(self.connection.__aenter__())
            for subscription in SUBSCRIPTIONS:
                self._subscribe(subscription)
            # pg-b's messages wait for a producer until a step brings one
            self._heartbeat("pg-a", "i-1")
        except BaseException:
            self.runner.close()
            raise

    def teardown(self) -> None:
        try:
            self.run(self.connection.__aexit__(None, None, None))
        finally:
            self.runner.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coroutine)

    def attempt(self, coroutine: Coroutine[Any, Any, T]) -> T | CoordinatorError:
        """The core's answer, or the CoordinatorError it refused with (anything else fails)."""
        try:
            return self.run(coroutine)
        except CoordinatorError as error:
            return error

    # --- producing ------------------------------------------------------------

    def _store(self, drafts: list[Draft], *, batch: bool) -> None:
        expected = self.model.expect_store(drafts)
        note(f"store {[d.message_id for d in drafts]}: expect {expected}")
        messages = [_new_message(d) for d in drafts]
        transactional = drafts[0].kind is MessageKind.TRANSACTIONAL
        if batch:
            call = (
                self.core.transactions.prepare_batch(messages)
                if transactional
                else self.core.transactions.send_batch(messages)
            )
        else:
            (message,) = messages
            call = (
                self.core.transactions.prepare(message)
                if transactional
                else self.core.transactions.send(message)
            )
        outcome = self.attempt(call)
        refused = [e for e in expected if isinstance(e, Refused)]
        if refused:
            # A batch is all or nothing: one conflict refuses it whole.
            assert isinstance(outcome, refused[0].error), f"expected {refused[0]}, got {outcome!r}"
            return
        assert not isinstance(outcome, CoordinatorError), f"expected {expected}, got {outcome!r}"
        results: list[SendResult] = outcome if isinstance(outcome, list) else [outcome]
        assert len(results) == len(drafts)
        for draft, want, got in zip(drafts, expected, results, strict=True):
            assert isinstance(want, Stored)
            assert got.message_id == draft.message_id and got.created is want.created, (want, got)
            if want.created:
                assert got.state is (PREPARED if transactional else COMMITTED), got
                assert (got.transaction_id is not None) is transactional, got
                self.model.add(draft, got.offset, got.transaction_id)
            elif want.existing is not None:  # a retry answers with what is stored
                old = want.existing
                assert (got.offset, got.transaction_id, got.state) == (
                    old.offset,
                    old.transaction_id,
                    old.state,
                ), (old, got)
            else:  # a repeat within the batch answers like its first occurrence
                assert want.same_as is not None
                first = results[want.same_as]
                assert (got.offset, got.transaction_id) == (first.offset, first.transaction_id)

    @rule(draft=HALF_DRAFTS, retry=st.booleans(), pick=PICK)
    def prepare(self, draft: Draft, retry: bool, pick: int) -> None:
        """A half message; retry: a producer sending a stored one again (its tags may differ:
        they are not part of what a retry must repeat)."""
        if retry and self.model.transactional():
            stored = _pick(self.model.transactional(), pick).draft
            draft = Draft(
                stored.message_id,
                stored.kind,
                stored.producer_group,
                stored.topic,
                draft.tags,
                stored.body,
            )
        self._store([draft], batch=False)

    @rule(drafts=st.lists(HALF_DRAFTS, min_size=1, max_size=3))
    def prepare_batch(self, drafts: list[Draft]) -> None:
        self._store(drafts, batch=True)

    @rule(draft=NORMAL_DRAFTS)
    def send(self, draft: Draft) -> None:
        self._store([draft], batch=False)

    # --- ending ---------------------------------------------------------------

    def _end_request(
        self,
        message: Message,
        resolution: Resolution,
        from_check: bool,
        group: str,
        message_id: str | None,
    ) -> EndRequest:
        assert message.transaction_id is not None and message.producer_group is not None
        own_group = message.producer_group
        other_group = next(g for g in PRODUCER_GROUPS if g != own_group)
        other_id = next(i for i in MESSAGE_IDS if i != message.message_id)
        return EndRequest(
            transaction_id=message.transaction_id,
            producer_group=own_group if group == "own" else other_group,
            resolution=resolution,
            from_check=from_check,
            message_id={None: None, "own": message.message_id, "other": other_id}[message_id],
        )

    def _expect_end(self, want: Answered | Refused, got: EndResult | CoordinatorError) -> None:
        if isinstance(want, Refused):
            assert isinstance(got, want.error), f"expected {want}, got {got!r}"
            if want.current_state is not None:
                assert getattr(got, "current_state", None) == want.current_state.value, got
            return
        assert isinstance(got, EndResult), (
            f"expected {want.state} (changed={want.changed}), got {got!r}"
        )
        message = want.message
        assert (got.offset, got.message_id, got.transaction_id) == (
            message.offset,
            message.message_id,
            message.transaction_id,
        )
        assert (got.state, got.changed) == (want.state, want.changed), (want, got)

    def _end(self, request: EndRequest) -> None:
        want, transition = self.model.plan_end(
            request.transaction_id,
            request.producer_group,
            request.resolution,
            request.from_check,
            request.message_id,
        )
        note(f"end {request}: expect {want}")
        self.model.apply([transition] if transition else [])
        self._expect_end(want, self.attempt(self.core.transactions.end(request)))

    @rule(
        pick=PICK,
        resolution=st.sampled_from(Resolution),
        from_check=st.booleans(),
        group=GROUP_CHOICE,
        message_id=MESSAGE_ID_CHOICE,
        which=st.sampled_from(("pending", "pending", "any", "unknown")),
    )
    def end(
        self,
        pick: int,
        resolution: Resolution,
        from_check: bool,
        group: str,
        message_id: str | None,
        which: str,
    ) -> None:
        """End a transaction: mostly a pending one, else any (repeats and conflicts) or
        one that does not exist."""
        candidates = self.model.transactional()
        if which == "pending":
            candidates = self.model.in_state(PREPARED) or candidates
        if which == "unknown" or not candidates:
            self._end(EndRequest("no-such-transaction", PRODUCER_GROUPS[0], resolution))
            return
        message = _pick(candidates, pick)
        self._end(self._end_request(message, resolution, from_check, group, message_id))

    @precondition(lambda self: self.model.transactional())
    @rule(
        items=st.lists(
            st.tuples(PICK, st.sampled_from(Resolution), st.booleans(), GROUP_CHOICE),
            min_size=1,
            max_size=3,
        )
    )
    def end_batch(self, items: list[tuple[int, Resolution, bool, str]]) -> None:
        requests: dict[str, EndRequest] = {}  # a batch names each transaction once
        for pick, resolution, from_check, group in items:
            message = _pick(self.model.transactional(), pick)
            request = self._end_request(message, resolution, from_check, group, None)
            requests.setdefault(request.transaction_id, request)
        plans = [
            self.model.plan_end(
                r.transaction_id, r.producer_group, r.resolution, r.from_check, None
            )
            for r in requests.values()
        ]
        note(f"end batch {list(requests.values())}: expect {[want for want, _ in plans]}")
        self.model.apply([t for _, t in plans if t is not None])
        outcomes = self.run(self.core.transactions.end_batch(list(requests.values())))
        assert len(outcomes) == len(plans)
        for (want, _), got in zip(plans, outcomes, strict=True):
            self._expect_end(want, got)

    # --- check-backs ----------------------------------------------------------

    def _make_due(self, messages: list[Message]) -> None:
        """The transaction timeout or check interval of these messages passes."""
        self.db.execute(
            "UPDATE messages SET next_check_at = now() - interval '1 second' WHERE id = ANY(%s)",
            ([m.offset for m in messages],),
        )
        for message in messages:
            message.due = True

    @precondition(
        lambda self: any(
            not m.past_retention for m in self.model.in_state(PREPARED, MessageState.DISCARDED)
        )
    )
    @rule(pick=PICK)
    def pass_retention(self, pick: int) -> None:
        """The message was born more than retention_hours ago."""
        candidates = [
            m for m in self.model.in_state(PREPARED, MessageState.DISCARDED) if not m.past_retention
        ]
        message = _pick(candidates, pick)
        self.db.execute(
            "UPDATE messages SET born_at = now() - make_interval(secs => %s) WHERE id = %s",
            (RETENTION_SECONDS + 3600, message.offset),
        )
        message.past_retention = True

    @rule(
        due=st.sampled_from(("none", "one", "all")),
        pick=PICK,
        polled=st.booleans(),
        rounds=st.integers(1, 3),
    )
    def check_rounds(self, due: str, pick: int, polled: bool, rounds: int) -> None:
        """A few check-back rounds in a row (enough to use up check_max), each after the
        check time of none, one or all pending messages."""
        for _ in range(rounds):
            self._check_round(due, pick, polled)

    def _check_round(self, due: str, pick: int, polled: bool) -> None:
        """One round; polled: the instances it addressed were waiting in a long poll and
        take their requests at once."""
        prepared = self.model.in_state(PREPARED)
        if prepared and due != "none":
            self._make_due(prepared if due == "all" else [_pick(prepared, pick)])
        want = self.model.claim_round()
        note(f"check round: expect {want}")
        result = self.run(self.core.checkback.rounds.run_round())

        def addressed(action: ClaimAction, instance_id: str | None) -> str | None:
            # a discarded or expired message is addressed to nobody (the claim
            # reports the instance it would have asked: not a state, not compared)
            return instance_id if action is ClaimAction.CHECK else None

        got = sorted(
            (c.offset, c.action.value, c.check_count, addressed(c.action, c.instance_id))
            for c in (*result.checked, *result.waiting, *result.discarded, *result.expired)
        )
        expected = sorted((c.offset, c.action.value, c.check_count, c.instance_id) for c in want)
        assert got == expected, (want, result)
        if polled:
            addressed_to = {
                (self.model.by_offset[c.offset].producer_group or "", c.instance_id)
                for c in want
                if c.instance_id is not None
            }
            for group, instance in sorted(addressed_to):
                self._poll(group, instance)

    def _heartbeat(self, group: str, instance: str) -> None:
        self.model.heartbeat(group, instance)
        producer = self.run(self.core.checkback.producers.heartbeat(group, instance))
        assert producer.live and (producer.producer_group, producer.instance_id) == (
            group,
            instance,
        )

    @rule(
        action=st.sampled_from(("heartbeat", "leave", "go_silent")),
        group=st.sampled_from(PRODUCER_GROUPS),
        instance=st.sampled_from(INSTANCES),
        pick=PICK,
    )
    def producer_instance(self, action: str, group: str, instance: str, pick: int) -> None:
        """An instance registers or says it is alive (any), or one that is live shuts down
        cleanly or is not heard from for longer than producer_ttl_seconds."""
        live = [key for key, alive in self.model.instances.items() if alive]
        if action != "heartbeat" and live:
            group, instance = _pick(sorted(live), pick)
        if action == "heartbeat":
            self._heartbeat(group, instance)
        elif action == "leave":
            registered = self.model.leave(group, instance)
            assert self.run(self.core.checkback.producers.leave(group, instance)) is registered
        else:
            self.db.execute(
                "UPDATE producers SET last_seen_at = now() - make_interval(secs => %s) "
                "WHERE producer_group = %s AND instance_id = %s",
                (CORE_SETTINGS.producer_ttl_seconds + 60, group, instance),
            )
            self.model.silence(group, instance)

    @precondition(
        lambda self: any(
            m.check is not None and m.check.status == "no_producer"
            for m in self.model.in_state(PREPARED)
        )
    )
    @rule(pick=PICK, instance=st.sampled_from(INSTANCES))
    def producer_returns(self, pick: int, instance: str) -> None:
        """An instance of a group whose messages wait for a producer comes (back) to life:
        they become due at once."""
        waiting = [
            m
            for m in self.model.in_state(PREPARED)
            if m.check is not None and m.check.status == "no_producer"
        ]
        group = _pick(waiting, pick).producer_group
        assert group is not None
        self._heartbeat(group, instance)

    @rule(
        group=st.sampled_from(PRODUCER_GROUPS),
        instance=st.sampled_from(INSTANCES),
        addressed=st.booleans(),
    )
    def poll(self, group: str, instance: str, addressed: bool) -> None:
        """A long poll (wait 0) by an instance; addressed: one that has a request waiting."""
        waiting = [
            m
            for m in self.model.in_state(PREPARED)
            if m.check is not None and m.check.status == "pending"
        ]
        if addressed and waiting:
            chosen = waiting[0]
            assert chosen.producer_group is not None and chosen.check is not None
            group, instance = chosen.producer_group, chosen.check.instance_id or instance
        self._poll(group, instance)

    def _poll(self, group: str, instance: str) -> None:
        want = self.model.poll(group, instance)
        got = self.run(self.core.checkback.pull.poll(group, instance, wait_seconds=0))
        assert [(r.offset, r.transaction_id, r.check_count) for r in got] == [
            (m.offset, m.transaction_id, m.check_count) for m in want
        ], (want, got)
        assert all(
            r.producer_group == group and r.body == m.draft.body
            for r, m in zip(got, want, strict=True)
        )
        self.taken_checks += want

    @precondition(lambda self: self.taken_checks)
    @rule(pick=PICK, resolution=st.sampled_from(Resolution), with_message_id=st.booleans())
    def answer_check(self, pick: int, resolution: Resolution, with_message_id: bool) -> None:
        """A producer answers a check request it polled (maybe after others resolved it)."""
        message = _pick(self.taken_checks, pick)
        self._end(
            self._end_request(message, resolution, True, "own", "own" if with_message_id else None)
        )

    # --- operator -------------------------------------------------------------

    def _expect_operator(
        self, want: Answered | Refused, got: OperatorResult | CoordinatorError
    ) -> None:
        if isinstance(want, Refused):
            assert isinstance(got, want.error), f"expected {want}, got {got!r}"
            if want.current_state is not None:
                assert getattr(got, "current_state", None) == want.current_state.value, got
            return
        assert isinstance(got, OperatorResult), f"expected {want}, got {got!r}"
        assert got.offset == want.message.offset
        assert (got.previous_state, got.state, got.changed) == (
            want.previous_state,
            want.state,
            want.changed,
        ), (want, got)

    @precondition(lambda self: self.model.by_offset)
    @rule(
        pick=PICK,
        action=st.sampled_from(("commit", "rollback", "recheck")),
        open_only=st.booleans(),
    )
    def operator(self, pick: int, action: str, open_only: bool) -> None:
        """`coordinator tx commit|rollback|recheck`: mostly of a message it applies to
        (prepared or discarded; discarded for a recheck), else of any."""
        candidates = list(self.model.by_offset.values())
        if open_only:
            discarded = MessageState.DISCARDED
            states = (discarded,) if action == "recheck" else (PREPARED, discarded)
            candidates = self.model.in_state(*states) or candidates
        self._operate(_pick(candidates, pick), action)

    def _operate(self, message: Message, action: str) -> None:
        if action == "recheck":
            want = self.model.operator_recheck(message)
            call = self.core.checkback.operator.recheck(message.offset)
        else:
            want = self.model.operator_resolve(message, Resolution(action))
            call = self.core.checkback.operator.resolve(message.offset, Resolution(action))
        note(f"operator {action} of {message.offset}: expect {want}")
        self._expect_operator(want, self.attempt(call))

    @precondition(lambda self: self.model.in_state(MessageState.DISCARDED))
    @rule(pick=PICK, action=st.sampled_from(("commit", "rollback", "recheck", "recheck")))
    def operator_on_discarded(self, pick: int, action: str) -> None:
        """What an operator does with a discarded message (a recheck is refused past
        retention)."""
        self._operate(_pick(self.model.in_state(MessageState.DISCARDED), pick), action)

    @rule(pick=PICK, by=st.sampled_from(("status", "offset", "message_id", "transaction_id")))
    def read(self, pick: int, by: str) -> None:
        """What `coordinator tx show` and GET /v1/transactions/{id} read (one message and
        its history), or `coordinator status` and GET /v1/status (counts and lag)."""
        messages = list(self.model.by_offset.values())
        if by == "transaction_id":
            messages = self.model.transactional()
        if by == "status" or not messages:
            self._status_and_lag()
            return
        message = _pick(messages, pick)
        key = {
            "offset": message.offset,
            "message_id": message.message_id,
            "transaction_id": message.transaction_id,
        }
        lookup: dict[str, object] = {by: key[by]}
        if by == "message_id":
            # An id is unique in its producer group (without one: its topic);
            # used in several, it is ambiguous until narrowed to one.
            sharing = [k for k in self.model.messages if k[0] == message.message_id]
            if len(sharing) > 1:
                with pytest.raises(AmbiguousMessageId):
                    self.run(self.core.inspection.get_message(message_id=message.message_id))
            if message.producer_group is not None:
                lookup["producer_group"] = message.producer_group
            else:
                lookup["topic"] = message.topic
        record = self.run(self.core.inspection.get_message(**lookup))  # type: ignore[arg-type]
        assert (record.offset, record.state, record.check_count, record.resolution_source) == (
            message.offset,
            message.state,
            message.check_count,
            message.resolution_source,
        ), (message, record)
        assert [(h.source, h.from_state, h.to_state) for h in record.history] == message.history
        assert (record.topic, record.tags, record.body) == (
            message.topic,
            message.draft.tags,
            message.draft.body,
        )

    def _status_and_lag(self) -> None:

        async def read() -> tuple[Status, list[ConsumerLag]]:
            return await self.core.inspection.status(), await self.core.delivery.lag()

        status, lag = self.run(read())
        assert Counter(
            {(c.producer_group, c.topic, c.state): c.count for c in status.counts}
        ) == Counter((m.producer_group, m.topic, m.state) for m in self.model.by_offset.values())
        assert status.pending_total == len(self.model.in_state(PREPARED))
        # a row per subscription, and per group and topic with dead letters
        dead = Counter(
            (group, self.model.by_offset[offset].topic) for offset, group in self.model.dead_letters
        )
        pairs = {(s.group, s.topic) for s in self.model.subscriptions} | dead.keys()
        want = {}
        for pair in pairs:
            pending = [d for d in self.model.deliveries.values() if (d.group, d.topic) == pair]
            want[pair] = (len(pending), sum(d.in_flight for d in pending), dead[pair])
        got = {(x.consumer_group, x.topic): (x.lag, x.in_flight, x.dead_letters) for x in lag}
        assert got == want

    # --- consuming --------------------------------------------------------------

    @rule(
        group=st.sampled_from(CONSUMER_GROUPS),
        max_messages=st.integers(1, 3),
        then=st.sampled_from(("keep", "ack", "nack")),
        rounds=st.integers(1, 3),
    )
    def receive(self, group: str, max_messages: int, then: str, rounds: int) -> None:
        """A consumer receives a batch, then holds it, acks it, or nacks it (it failed);
        a few times in a row (enough for nacked messages to reach the dead letters)."""
        for _ in range(rounds):
            self._receive(group, max_messages, then)

    def _receive(self, group: str, max_messages: int, then: str) -> None:
        if not self.model.subscribes(group):
            got = self.attempt(self.core.delivery.receive(group, max_messages=max_messages))
            assert isinstance(got, NotFound), f"a group without subscriptions received {got!r}"
            return
        acked = set(self.model.acked)
        in_flight = {d.key for d in self.model.deliveries.values() if d.in_flight}
        want, buried = self.model.receive(group, max_messages)
        note(
            f"receive {group}: expect {[d.offset for d in want]}, bury {[d.offset for d in buried]}"
        )
        got = self.run(
            self.core.delivery.receive(
                group, max_messages=max_messages, invisible_seconds=LONG_INVISIBLE
            )
        )
        for received in got:
            key = (received.offset, group)
            message = self.model.by_offset.get(received.offset)
            state = message.state if message else "unknown"
            assert state is COMMITTED, f"delivered message {received.offset}, which is {state}"
            assert key not in acked, f"delivered message {received.offset} to {group} after its ack"
            assert key not in in_flight, f"delivered message {received.offset} while in flight"
        assert [r.offset for r in got] == [d.offset for d in want], (want, got)
        for received, delivery in zip(got, want, strict=True):
            message = self.model.by_offset[delivery.offset]
            assert received.consumer_group == group
            assert received.delivery_attempt == delivery.attempts, (delivery, received)
            assert (received.message_id, received.topic, received.body) == (
                message.message_id,
                message.topic,
                message.draft.body,
            )
            self.model.issue(delivery, received.receipt_handle)
        if then != "keep":
            for received in got:
                self._use_handle(group, received.receipt_handle, then)

    def _use_handle(self, group: str, handle: str, action: str) -> None:
        """ack, extend (a long invisible duration) or nack (a tiny one) with one handle."""
        want = self.model.handle_outcome(group, handle)
        delivery = self.model.handles[handle]
        note(f"{action} {handle} as {group}: expect {want}")
        if action == "ack":
            got = self.attempt(self.core.delivery.ack(group, handle))
        else:
            seconds = LONG_INVISIBLE if action == "extend" else NACK_INVISIBLE
            got = self.attempt(self.core.delivery.change_invisible_duration(group, handle, seconds))
        if want == "stale":
            assert isinstance(got, ReceiptHandleStale), f"expected a stale handle, got {got!r}"
        elif want == "not_found":
            assert isinstance(got, NotFound), f"expected not found, got {got!r}"
        elif action == "ack":
            assert got is None, got
            self.model.ack(handle)
        else:
            assert not isinstance(got, CoordinatorError) and got is not None, got
            assert got.delivery_attempt == delivery.attempts and got.receipt_handle != handle
            self.model.issue(delivery, got.receipt_handle)
            delivery.in_flight = True
            if action == "nack":
                self._wait_until_visible(got.receipt_handle)
                delivery.in_flight = False

    def _wait_until_visible(self, handle: str) -> None:
        deadline = time.monotonic() + 5
        while not self.db.execute(
            "SELECT visible_at <= now() FROM deliveries WHERE id = %s", (delivery_id_of(handle),)
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "a 1 ms invisible duration lasted more than 5 s"
            time.sleep(0.002)

    @precondition(lambda self: self.model.handles)
    @rule(
        pick=PICK,
        action=st.sampled_from(("ack", "ack", "extend", "nack")),
        which=st.sampled_from(("current", "current", "any", "other_group")),
    )
    def use_handle(self, pick: int, action: str, which: str) -> None:
        """Ack or change the invisible duration with the current handle of a received
        message, or with any handle ever issued (mostly stale or gone by now), or with
        one the other group was given."""
        received = self.model.received()
        if which == "current" and received:
            delivery = _pick(received, pick)
            assert delivery.handle is not None
            handle, group = delivery.handle, delivery.group
        else:
            handle = _pick(list(self.model.handles), pick)
            group = self.model.handles[handle].group
            if which == "other_group":
                group = next(g for g in CONSUMER_GROUPS if g != group)
        self._use_handle(group, handle, action)

    @precondition(lambda self: self.model.handles)
    @rule(picks=st.lists(PICK, min_size=1, max_size=3), group=st.sampled_from(CONSUMER_GROUPS))
    def ack_batch(self, picks: list[int], group: str) -> None:
        handles = [_pick(list(self.model.handles), p) for p in picks]
        # Every handle is judged against the deliveries as they were before the batch.
        want = [self.model.handle_outcome(group, h) for h in handles]
        note(f"ack batch {handles} as {group}: expect {want}")
        got = self.run(self.core.delivery.ack_batch(group, handles))
        outcomes = [ACK_OUTCOMES[w] for w in want]
        assert [(r.receipt_handle, r.outcome) for r in got] == list(
            zip(handles, outcomes, strict=True)
        ), got
        for handle in dict.fromkeys(h for h, w in zip(handles, want, strict=True) if w == "ok"):
            self.model.ack(handle)

    @precondition(lambda self: any(d.in_flight for d in self.model.deliveries.values()))
    @rule(pick=PICK)
    def invisible_duration_runs_out(self, pick: int) -> None:
        delivery = _pick([d for d in self.model.deliveries.values() if d.in_flight], pick)
        self.db.execute(
            "UPDATE deliveries SET visible_at = now() - interval '1 second' "
            "WHERE message_offset = %s AND consumer_group = %s",
            delivery.key,
        )
        delivery.in_flight = False

    def _subscribe(self, subscription: Subscription) -> None:
        created = self.model.subscribe(subscription)
        result = self.run(
            self.core.delivery.subscribe(
                subscription.group,
                subscription.topic,
                subscription.expression,
                max_delivery_attempts=subscription.max_delivery_attempts,
            )
        )
        assert result.created is created, (subscription, result)

    @rule(subscription=st.sampled_from(SUBSCRIPTIONS), subscribe=st.booleans())
    def change_subscription(self, subscription: Subscription, subscribe: bool) -> None:
        """A consumer group subscribes (again: the same subscription is no change), or
        unsubscribes, dropping its unacked messages of the topic (not its dead letters)."""
        if subscribe:
            self._subscribe(subscription)
            return
        subscribed = self.model.subscribes(subscription.group, subscription.topic)
        self.model.unsubscribe(subscription.group, subscription.topic)
        got = self.attempt(self.core.delivery.unsubscribe(subscription.group, subscription.topic))
        if subscribed:
            assert not isinstance(got, CoordinatorError), got
            assert (got.consumer_group, got.topic) == (subscription.group, subscription.topic)
        else:
            assert isinstance(got, NotFound), f"unsubscribed what was not subscribed: {got!r}"

    @precondition(lambda self: self.model.dead_letters)
    @rule(group=st.sampled_from(CONSUMER_GROUPS))
    def requeue_dead_letters(self, group: str) -> None:
        want = self.model.requeue(group)
        assert self.run(self.core.delivery.requeue_dead_letters(group)) == want

    # --- invariants -----------------------------------------------------------

    def check_all_invariants(self) -> None:
        """All of them, for the scripted paths (hypothesis runs them itself in between)."""
        self.messages_match_the_model()
        self.history_follows_the_state_machine()
        self.deliveries_match_the_model()
        self.check_requests_match_the_model()

    @invariant()
    def messages_match_the_model(self) -> None:
        rows = self.db.execute(
            """
            SELECT id, message_id, transaction_id, kind, producer_group, topic, tags, body,
                   state, check_count, resolution_source, resolved_at IS NOT NULL,
                   next_check_at IS NOT NULL, next_check_at <= now(),
                   born_at <= now() - make_interval(secs => %s)
            FROM messages ORDER BY id
            """,
            (RETENTION_SECONDS,),
        ).fetchall()
        assert [r[0] for r in rows] == sorted(self.model.by_offset), "stored messages differ"
        for (
            offset, message_id, transaction_id, kind, group, topic, tags, body,
            state, check_count, source, resolved, scheduled, due, past_retention,
        ) in rows:  # fmt: skip
            m = self.model.by_offset[offset]
            assert (message_id, transaction_id, kind, group, topic, tags, bytes(body)) == (
                m.message_id,
                m.transaction_id,
                m.draft.kind.value,
                m.producer_group,
                m.topic,
                m.draft.tags,
                m.draft.body,
            ), m
            assert (state, check_count, source) == (
                m.state.value,
                m.check_count,
                m.resolution_source and m.resolution_source.value,
            ), (offset, state, check_count, source, m)
            # only a prepared message is unresolved, and only it has a next check
            assert resolved is (m.state is not PREPARED) and scheduled is (m.state is PREPARED), m
            assert (bool(due) if scheduled else False) is m.due, (offset, due, m)
            assert past_retention is m.past_retention

    @invariant()
    def history_follows_the_state_machine(self) -> None:
        rows = self.db.execute(
            "SELECT message_offset, source, from_state, to_state FROM message_history ORDER BY id"
        ).fetchall()
        history: dict[int, list[tuple[Source, MessageState | None, MessageState]]] = {}
        for offset, source, from_state, to_state in rows:
            step = (
                Source(source),
                MessageState(from_state) if from_state else None,
                MessageState(to_state),
            )
            assert (step[1], step[2], step[0]) in DOCUMENTED_TRANSITIONS, (
                f"message {offset}: undocumented transition {step}"
            )
            history.setdefault(offset, []).append(step)
        states = dict(self.db.execute("SELECT id, state FROM messages").fetchall())
        assert history.keys() == states.keys(), "history of a message that is not stored, or none"
        for offset, steps in history.items():
            # a chain from creation to the current state, each step from where the last ended
            assert steps[0][1] is None and all(
                b[1] is a[2] for a, b in itertools.pairwise(steps)
            ), steps
            assert steps[-1][2].value == states[offset], (offset, steps, states[offset])
            assert steps == self.model.by_offset[offset].history, (offset, steps)

    @invariant()
    def deliveries_match_the_model(self) -> None:
        undeliverable = self.db.execute(
            """
            SELECT 'delivery', d.message_offset, d.consumer_group, m.state FROM deliveries d
            LEFT JOIN messages m ON m.id = d.message_offset
            WHERE m.state IS DISTINCT FROM 'committed'
            UNION ALL
            SELECT 'dead letter', x.message_offset, x.consumer_group, m.state FROM dead_letters x
            LEFT JOIN messages m ON m.id = x.message_offset
            WHERE m.state IS DISTINCT FROM 'committed'
            """
        ).fetchall()
        assert not undeliverable, f"deliveries of messages that are not committed: {undeliverable}"
        rows = self.db.execute(
            "SELECT message_offset, consumer_group, attempts, receipt_handle, visible_at > now() "
            "FROM deliveries"
        ).fetchall()
        again = {(o, g) for o, g, *_ in rows} & self.model.acked
        assert not again, f"acked messages pending delivery again: {again}"
        assert {(o, g): (a, h, f) for o, g, a, h, f in rows} == {
            k: (d.attempts, d.handle, d.in_flight) for k, d in self.model.deliveries.items()
        }
        dead = self.db.execute(
            "SELECT message_offset, consumer_group, attempts FROM dead_letters ORDER BY id"
        ).fetchall()
        assert [((o, g), a) for o, g, a in dead] == list(self.model.dead_letters.items())

    @invariant()
    def check_requests_match_the_model(self) -> None:
        rows = self.db.execute(
            "SELECT c.message_offset, c.producer_group, c.status, c.via, c.instance_id, "
            "c.check_count, c.no_producer_attempts, m.state "
            "FROM check_requests c LEFT JOIN messages m ON m.id = c.message_offset"
        ).fetchall()
        assert all(r[-1] == "prepared" for r in rows), (
            f"check requests of resolved messages: {rows}"
        )
        want = {}
        for m in self.model.in_state(PREPARED):
            if m.check is not None:
                c = m.check
                via = "pull" if c.instance_id else None
                want[m.offset] = (
                    m.producer_group,
                    c.status,
                    via,
                    c.instance_id,
                    c.check_count,
                    c.no_producer_attempts,
                )
        assert {r[0]: tuple(r[1:-1]) for r in rows} == want


STATEFUL_SETTINGS = hypothesis_settings(
    max_examples=int(os.environ.get("COORDINATOR_STATEFUL_EXAMPLES", "100")),
    stateful_step_count=40,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,
    # no "explain" phase: its tracing made a failing run take minutes longer
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_the_core_follows_its_model(database_url: str, db: psycopg.Connection[Any]) -> None:
    machine = type("Machine", (CoreMachine,), {"database_url": database_url, "db": db})
    run_state_machine_as_test(machine, settings=STATEFUL_SETTINGS)


# --- scripted paths ------------------------------------------------------------
# The random search reaches the deep paths (a producer coming back, discard and
# recheck, dead letters and requeue, stale receipts) only in some examples.
# These scripts walk each of them on every run, through the same rules and
# invariants, and check that they got where they meant to.


def _half(message_id: str, group: str, topic: str = "t1", tags: str | None = None) -> Draft:
    return Draft(message_id, MessageKind.TRANSACTIONAL, group, topic, tags, b"one")


def _producer_comes_back_and_answers(m: CoreMachine, step: Step) -> None:
    step(m.prepare, draft=_half("m-0", "pg-b", tags="TagA"), retry=False, pick=0)
    step(m.check_rounds, due="all", pick=0, polled=True, rounds=1)  # nobody: waits, uncounted
    step(m.producer_returns, pick=0, instance="i-2")  # due at once
    step(m.check_rounds, due="none", pick=0, polled=True, rounds=1)  # i-2's poll takes it
    step(m.answer_check, pick=0, resolution=Resolution.COMMIT, with_message_id=True)
    step(m.answer_check, pick=0, resolution=Resolution.ROLLBACK, with_message_id=False)
    step(m.receive, group="cg-tag", max_messages=3, then="nack", rounds=2)  # 1 attempt allowed
    step(m.receive, group="cg-all", max_messages=3, then="ack", rounds=1)
    step(m.requeue_dead_letters, group="cg-tag")
    step(m.receive, group="cg-tag", max_messages=3, then="ack", rounds=1)
    message = m.model.the_message("m-0")
    assert message.history[1:] == [(Source.CHECK, PREPARED, COMMITTED)]
    assert {(message.offset, "cg-all"), (message.offset, "cg-tag")} <= m.model.acked
    assert not m.model.dead_letters and not m.model.deliveries


def _discard_recheck_and_retention(m: CoreMachine, step: Step) -> None:
    discarded = MessageState.DISCARDED
    step(m.prepare, draft=_half("m-1", "pg-a", topic="t2"), retry=False, pick=0)
    step(m.prepare, draft=_half("m-2", "pg-a"), retry=False, pick=0)
    step(m.check_rounds, due="all", pick=0, polled=False, rounds=3)  # 2 checks, then discarded
    step(m.operator_on_discarded, pick=0, action="recheck")  # m-1 prepared again
    step(m.operator_on_discarded, pick=0, action="commit")  # m-2 committed by hand
    step(m.pass_retention, pick=0)  # m-1
    step(m.check_rounds, due="all", pick=0, polled=False, rounds=1)  # m-1 expired
    step(m.operator, pick=0, action="commit", open_only=False)  # refused: expired
    step(m.end, pick=0, resolution=Resolution.COMMIT, from_check=False, group="own",
         message_id=None, which="any")  # fmt: skip
    step(m.prepare, draft=_half("m-3", "pg-a"), retry=False, pick=0)
    step(m.check_rounds, due="all", pick=0, polled=False, rounds=3)
    step(m.prepare, draft=_half("m-8", "pg-a", tags="TagA"), retry=False, pick=0)
    step(m.end, pick=0, resolution=Resolution.ROLLBACK, from_check=False, group="own",
         message_id=None, which="pending")  # fmt: skip
    step(m.receive, group="cg-tag", max_messages=3, then="ack", rounds=1)  # nothing to get
    step(m.pass_retention, pick=0)  # m-3, discarded
    step(m.operator_on_discarded, pick=0, action="recheck")  # refused: past retention
    states = {i: m.model.the_message(i).state for i in ("m-1", "m-2", "m-3")}
    assert states == {"m-1": MessageState.EXPIRED, "m-2": COMMITTED, "m-3": discarded}
    assert m.model.the_message("m-2").history[-2:] == [
        (Source.DISCARD, PREPARED, discarded),
        (Source.OPERATOR, discarded, COMMITTED),
    ]
    assert (Source.OPERATOR, discarded, PREPARED) in m.model.the_message("m-1").history
    assert m.model.the_message("m-8").state is MessageState.ROLLED_BACK


def _receipts_go_stale(m: CoreMachine, step: Step) -> None:
    normal = Draft("m-4", MessageKind.NORMAL, "pg-a", "t1", None, b"two")
    step(m.send, draft=normal)
    step(m.receive, group="cg-all", max_messages=1, then="keep", rounds=1)  # handle 0
    step(m.receive, group="cg-all", max_messages=1, then="keep", rounds=1)  # in flight: none
    step(m.invisible_duration_runs_out, pick=0)
    step(m.use_handle, pick=0, action="extend", which="current")  # still its handle: 1
    step(m.invisible_duration_runs_out, pick=0)
    step(m.receive, group="cg-all", max_messages=1, then="keep", rounds=1)  # attempt 2: 2
    step(m.use_handle, pick=0, action="ack", which="any")  # stale
    step(m.use_handle, pick=1, action="nack", which="other_group")  # not found
    step(m.ack_batch, picks=[0, 2, 2], group="cg-all")  # stale, acked, acked
    step(m.use_handle, pick=2, action="ack", which="any")  # not found: acked
    offset = m.model.the_message("m-4").offset
    assert len(m.model.handles) == 3 and (offset, "cg-all") in m.model.acked


def _unsubscribe_and_come_back(m: CoreMachine, step: Step) -> None:
    tag_t1 = SUBSCRIPTIONS[2]
    step(m.send, draft=Draft("m-5", MessageKind.NORMAL, None, "t1", "TagA", b"one"))
    step(m.receive, group="cg-tag", max_messages=1, then="nack", rounds=2)  # dead letter
    step(m.send, draft=Draft("m-6", MessageKind.NORMAL, None, "t1", "TagA", b"two"))
    step(m.receive, group="cg-tag", max_messages=1, then="keep", rounds=1)  # m-6 in flight
    step(m.change_subscription, subscription=tag_t1, subscribe=False)  # drops m-6, not m-5
    step(m.use_handle, pick=1, action="ack", which="any")  # m-6's handle: gone
    step(m.receive, group="cg-tag", max_messages=1, then="keep", rounds=1)  # no subscription
    step(m.requeue_dead_letters, group="cg-tag")  # nothing: it no longer subscribes
    step(m.change_subscription, subscription=tag_t1, subscribe=False)  # not subscribed
    step(m.send, draft=Draft("m-7", MessageKind.NORMAL, None, "t1", "TagA", b"one"))
    step(m.change_subscription, subscription=tag_t1, subscribe=True)
    step(m.change_subscription, subscription=tag_t1, subscribe=True)  # the same: no change
    step(m.requeue_dead_letters, group="cg-tag")  # m-5 again
    step(m.receive, group="cg-tag", max_messages=3, then="ack", rounds=1)  # m-5 only
    m5, m6, m7 = (m.model.the_message(i).offset for i in ("m-5", "m-6", "m-7"))
    assert (m5, "cg-tag") in m.model.acked and not m.model.dead_letters
    assert not {(m6, "cg-tag"), (m7, "cg-tag")} & (m.model.acked | m.model.deliveries.keys())


Step = Callable[..., None]
SCRIPTS: dict[str, Callable[[CoreMachine, Step], None]] = {
    "producer comes back and answers": _producer_comes_back_and_answers,
    "discard, recheck and retention": _discard_recheck_and_retention,
    "receipts go stale": _receipts_go_stale,
    "unsubscribe and come back": _unsubscribe_and_come_back,
}


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=list(SCRIPTS))
def test_scripted_paths_follow_the_model(
    database_url: str, db: psycopg.Connection[Any], script: Callable[[CoreMachine, Step], None]
) -> None:
    machine_class = type("Machine", (CoreMachine,), {"database_url": database_url, "db": db})

    # Run once inside hypothesis, which the rules' notes and events need.
    @hypothesis_settings(max_examples=1, database=None, deadline=None, phases=[Phase.generate])
    @given(st.just(None))
    def run(_: None) -> None:
        machine = machine_class()

        def step(rule_method: Callable[..., None], **arguments: Any) -> None:
            rule_method(**arguments)
            machine.check_all_invariants()

        try:
            machine.check_all_invariants()
            script(machine, step)
        finally:
            machine.teardown()

    run()
