"""A plain-Python model of what the core must hold, for the state-machine test.

`CoreModel` follows docs/state-machine.md, docs/check-back.md and
docs/consuming.md, written independently of the SQL that implements them:
the messages with their states and history, the check request of each
pending half message, the producer registry, and the deliveries, acks and
dead letters of the consumer groups. The test drives the real core and the
model side by side and compares every answer, and after every step the whole
database, with the model.

What the model cannot know ahead (offsets, transaction ids, receipt handles)
it learns from the core's answers; everything else it predicts. Time is not
modelled as a clock: the test moves timestamps in SQL (a check becomes due,
a message passes retention, an invisible duration runs out) and tells the
model, so every prediction is exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hypothesis import event

from coordinator.domain.checkback import ClaimAction
from coordinator.domain.errors import (
    CoordinatorError,
    MessageIdConflict,
    NotFound,
    ProducerGroupMismatch,
    StateConflict,
)
from coordinator.domain.states import MessageKind, MessageState, Resolution, Source

PREPARED = MessageState.PREPARED
COMMITTED = MessageState.COMMITTED
ROLLED_BACK = MessageState.ROLLED_BACK
DISCARDED = MessageState.DISCARDED
EXPIRED = MessageState.EXPIRED

# Every (from, to, source) the documented state machine allows, and nothing else.
DOCUMENTED_TRANSITIONS: frozenset[tuple[MessageState | None, MessageState, Source]] = frozenset(
    {
        (None, PREPARED, Source.CLIENT),
        (None, COMMITTED, Source.CLIENT),
        *(
            (PREPARED, to, source)
            for to in (COMMITTED, ROLLED_BACK)
            for source in (Source.CLIENT, Source.CHECK, Source.OPERATOR)
        ),
        (PREPARED, DISCARDED, Source.DISCARD),
        (PREPARED, EXPIRED, Source.EXPIRY),
        (DISCARDED, PREPARED, Source.OPERATOR),
        (DISCARDED, COMMITTED, Source.OPERATOR),
        (DISCARDED, ROLLED_BACK, Source.OPERATOR),
    }
)

HistoryRow = tuple[Source, MessageState | None, MessageState]
HandleOutcome = Literal["ok", "stale", "not_found"]


@dataclass(frozen=True, slots=True)
class Draft:
    """A message as the test sends it. A retry must repeat kind, group, topic and body."""

    message_id: str
    kind: MessageKind
    producer_group: str | None
    topic: str
    tags: str | None
    body: bytes

    @property
    def fingerprint(self) -> tuple[MessageKind, str | None, str, bytes]:
        return (self.kind, self.producer_group, self.topic, self.body)

    @property
    def id_key(self) -> tuple[str, str | None, str | None]:
        """Where its id is unique: its producer group, or without one its topic."""
        if self.producer_group is not None:
            return (self.message_id, self.producer_group, None)
        return (self.message_id, None, self.topic)


@dataclass(slots=True)
class CheckRow:
    """The message's row in check_requests."""

    status: Literal["no_producer", "pending", "delivered"]
    instance_id: str | None
    check_count: int
    no_producer_attempts: int


@dataclass(slots=True)
class Message:
    draft: Draft
    offset: int
    transaction_id: str | None
    state: MessageState
    history: list[HistoryRow]
    check_count: int = 0
    due: bool = False  # next_check_at has passed
    past_retention: bool = False  # born more than retention_hours ago
    check: CheckRow | None = None

    @property
    def message_id(self) -> str:
        return self.draft.message_id

    @property
    def producer_group(self) -> str | None:
        return self.draft.producer_group

    @property
    def topic(self) -> str:
        return self.draft.topic

    @property
    def resolution_source(self) -> Source | None:
        return None if self.state is PREPARED else self.history[-1][0]


@dataclass(eq=False, slots=True)
class Delivery:
    """One unacked delivery of a committed message to one consumer group."""

    offset: int
    group: str
    topic: str
    seq: int  # creation order, as the deliveries' ids
    attempts: int = 0
    handle: str | None = None  # the current receipt handle (None until received)
    in_flight: bool = False  # its invisible duration is running

    @property
    def key(self) -> tuple[int, str]:
        return (self.offset, self.group)


@dataclass(frozen=True, slots=True)
class Subscription:
    group: str
    topic: str
    expression: str
    tags: frozenset[str] | None  # None: "*"
    max_delivery_attempts: int

    def matches(self, message: Message) -> bool:
        if message.topic != self.topic:
            return False
        return self.tags is None or message.draft.tags in self.tags


# --- what the model expects of one call ------------------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    error: type[CoordinatorError]
    current_state: MessageState | None = None  # what a StateConflict reports


@dataclass(frozen=True, slots=True)
class Answered:
    """A successful answer about one message: its state after the call, and whether it changed."""

    message: Message = field(repr=False)
    state: MessageState
    changed: bool
    previous_state: MessageState | None = None  # operator answers report it


@dataclass(frozen=True, slots=True)
class Stored:
    """The expected answer to one message of a prepare or send."""

    created: bool
    existing: Message | None = None  # a retry of a message stored before
    same_as: int | None = None  # a repeat within the batch: position of its first occurrence


@dataclass(frozen=True, slots=True)
class Claimed:
    offset: int
    action: ClaimAction
    check_count: int
    instance_id: str | None


@dataclass(slots=True)
class CoreModel:
    subscriptions: Sequence[Subscription]  # the ones in force now
    check_max: int
    # By where a message id is unique: (id, producer group) or, without a
    # group, (id, topic) (Draft.id_key).
    messages: dict[tuple[str, str | None, str | None], Message] = field(default_factory=dict)
    by_offset: dict[int, Message] = field(default_factory=dict)
    by_transaction: dict[str, Message] = field(default_factory=dict)
    # (producer group, instance id) -> live; absent: not registered
    instances: dict[tuple[str, str], bool] = field(default_factory=dict)
    deliveries: dict[tuple[int, str], Delivery] = field(default_factory=dict)
    # (offset, group) -> attempts; insertion order is the dead letters' id order
    dead_letters: dict[tuple[int, str], int] = field(default_factory=dict)
    acked: set[tuple[int, str]] = field(default_factory=set)
    handles: dict[str, Delivery] = field(default_factory=dict)  # every handle ever issued
    _seq: int = 0

    # --- state changes ------------------------------------------------------

    def transition(self, message: Message, to: MessageState, source: Source) -> None:
        step = (message.state, to, source)
        assert step in DOCUMENTED_TRANSITIONS, f"the model itself took an undocumented step {step}"
        event(f"transition {message.state.value} -> {to.value} ({source.value})")
        message.history.append((source, message.state, to))
        message.state = to
        if to is PREPARED:  # re-armed by an operator: a fresh budget, checked at once
            message.check_count = 0
            message.due = True
        else:
            message.check = None  # leaving prepared closes the check request
            message.due = False
        if to is COMMITTED:
            self._fan_out(message)

    def _fan_out(self, message: Message) -> None:
        for subscription in sorted(self.subscriptions, key=lambda s: s.group):
            if subscription.matches(message):
                key = (message.offset, subscription.group)
                assert key not in self.acked and key not in self.deliveries, key
                self._seq += 1
                self.deliveries[key] = Delivery(
                    message.offset, subscription.group, message.topic, self._seq
                )

    # --- producing ----------------------------------------------------------

    def expect_store(self, drafts: Sequence[Draft]) -> list[Stored | Refused]:
        """Per message of a batch: created, a retry of what is stored, or an id conflict."""
        expected: list[Stored | Refused] = []
        first_in_batch: dict[tuple[str, str | None, str | None], int] = {}
        for position, draft in enumerate(drafts):
            stored = self.messages.get(draft.id_key)
            if stored is not None:
                same = stored.draft.fingerprint == draft.fingerprint
                expected.append(
                    Stored(False, existing=stored) if same else Refused(MessageIdConflict)
                )
            elif draft.id_key in first_in_batch:
                first = first_in_batch[draft.id_key]
                same = drafts[first].fingerprint == draft.fingerprint
                expected.append(
                    Stored(False, same_as=first) if same else Refused(MessageIdConflict)
                )
            else:
                first_in_batch[draft.id_key] = position
                expected.append(Stored(True))
        return expected

    def the_message(self, message_id: str) -> Message:
        """The one message with this id (a test that used it in one group only)."""
        (message,) = (m for key, m in self.messages.items() if key[0] == message_id)
        return message

    def add(self, draft: Draft, offset: int, transaction_id: str | None) -> Message:
        state = PREPARED if draft.kind is MessageKind.TRANSACTIONAL else COMMITTED
        message = Message(draft, offset, transaction_id, state, [(Source.CLIENT, None, state)])
        self.messages[draft.id_key] = message
        self.by_offset[offset] = message
        if transaction_id is not None:
            self.by_transaction[transaction_id] = message
        if state is COMMITTED:
            self._fan_out(message)
        return message

    # --- ending -------------------------------------------------------------

    def plan_end(
        self,
        transaction_id: str,
        producer_group: str,
        resolution: Resolution,
        from_check: bool,
        message_id: str | None,
    ) -> tuple[Answered | Refused, tuple[Message, MessageState, Source] | None]:
        """The answer to one end request, and the transition it makes (not yet applied)."""
        message = self.by_transaction.get(transaction_id)
        if message is None or (message_id is not None and message_id != message.message_id):
            return Refused(NotFound), None
        if producer_group != message.producer_group:
            return Refused(ProducerGroupMismatch), None
        target = resolution.target_state
        if target is None:  # unknown: changes nothing, whatever the state
            return Answered(message, message.state, changed=False), None
        if message.state is PREPARED:
            source = Source.CHECK if from_check else Source.CLIENT
            return Answered(message, target, changed=True), (message, target, source)
        if message.state is target:
            return Answered(message, target, changed=False), None
        return Refused(StateConflict, message.state), None

    def apply(self, transitions: Iterable[tuple[Message, MessageState, Source]]) -> None:
        # One statement commits a batch: its deliveries are made in offset order.
        for message, to, source in sorted(transitions, key=lambda t: t[0].offset):
            self.transition(message, to, source)

    # --- operator -----------------------------------------------------------

    def operator_resolve(self, message: Message, resolution: Resolution) -> Answered | Refused:
        target = resolution.target_state
        assert target is not None
        previous = message.state
        if previous in (PREPARED, DISCARDED):
            self.transition(message, target, Source.OPERATOR)
            return Answered(message, target, changed=True, previous_state=previous)
        if previous is target:
            return Answered(message, target, changed=False, previous_state=previous)
        return Refused(StateConflict, previous)

    def operator_recheck(self, message: Message) -> Answered | Refused:
        if message.state is DISCARDED and not message.past_retention:
            self.transition(message, PREPARED, Source.OPERATOR)
            return Answered(message, PREPARED, changed=True, previous_state=DISCARDED)
        return Refused(StateConflict, message.state)

    # --- producers and check-backs -----------------------------------------

    def live_instances(self, producer_group: str) -> list[str]:
        return sorted(i for (g, i), live in self.instances.items() if g == producer_group and live)

    def heartbeat(self, producer_group: str, instance_id: str) -> None:
        was_live = self.instances.get((producer_group, instance_id), False)
        self.instances[(producer_group, instance_id)] = True
        if was_live:
            return
        # An instance coming (back) to life makes its group's waiting messages due.
        for message in self.by_offset.values():
            if (
                message.state is PREPARED
                and message.producer_group == producer_group
                and message.check is not None
                and message.check.status == "no_producer"
            ):
                message.due = True

    def leave(self, producer_group: str, instance_id: str) -> bool:
        return self.instances.pop((producer_group, instance_id), None) is not None

    def silence(self, producer_group: str, instance_id: str) -> None:
        if (producer_group, instance_id) in self.instances:
            self.instances[(producer_group, instance_id)] = False

    def claim_round(self) -> list[Claimed]:
        claimed: list[Claimed] = []
        due = [m for m in self.by_offset.values() if m.state is PREPARED and m.due]
        # Who is live is read once, before the round changes anything.
        live = {m.producer_group: self.live_instances(m.producer_group or "") for m in due}
        for message in sorted(due, key=lambda m: m.offset):
            if message.past_retention:  # expiry is checked before the budget
                self.transition(message, EXPIRED, Source.EXPIRY)
                claimed.append(
                    Claimed(message.offset, ClaimAction.EXPIRE, message.check_count, None)
                )
                continue
            if message.check_count >= self.check_max:
                self.transition(message, DISCARDED, Source.DISCARD)
                claimed.append(
                    Claimed(message.offset, ClaimAction.DISCARD, message.check_count, None)
                )
                continue
            instances = live[message.producer_group]
            waited = message.check.no_producer_attempts if message.check else 0
            message.due = False
            if instances:
                # the instances take turns, by the message and its check count
                instance = instances[(message.offset + message.check_count) % len(instances)]
                message.check_count += 1
                message.check = CheckRow("pending", instance, message.check_count, waited)
                claimed.append(
                    Claimed(message.offset, ClaimAction.CHECK, message.check_count, instance)
                )
                event("check-back addressed to an instance")
            else:  # not counted: the message waits for a producer
                message.check = CheckRow("no_producer", None, message.check_count, waited + 1)
                claimed.append(Claimed(message.offset, ClaimAction.WAIT, message.check_count, None))
                event("check-back without a live producer")
        return claimed

    def poll(self, producer_group: str, instance_id: str) -> list[Message]:
        """A long poll: a heartbeat, then the pending requests addressed to this instance."""
        self.heartbeat(producer_group, instance_id)
        taken = sorted(
            (
                m
                for m in self.by_offset.values()
                if m.state is PREPARED
                and m.producer_group == producer_group
                and m.check is not None
                and m.check.status == "pending"
                and m.check.instance_id == instance_id
            ),
            key=lambda m: m.offset,
        )
        for message in taken:
            assert message.check is not None
            message.check.status = "delivered"
        return taken

    # --- consumers ----------------------------------------------------------

    def subscription(self, group: str, topic: str) -> Subscription:
        (found,) = (s for s in self.subscriptions if s.group == group and s.topic == topic)
        return found

    def subscribes(self, group: str, topic: str | None = None) -> bool:
        return any(s.group == group and topic in (None, s.topic) for s in self.subscriptions)

    def subscribe(self, subscription: Subscription) -> bool:
        """True when it is new; it receives only messages committed from now on."""
        if self.subscribes(subscription.group, subscription.topic):
            return False
        self.subscriptions = [*self.subscriptions, subscription]
        return True

    def unsubscribe(self, group: str, topic: str) -> None:
        """Its unacked deliveries go (their handles are then unknown); dead letters stay."""
        self.subscriptions = [s for s in self.subscriptions if (s.group, s.topic) != (group, topic)]
        for key, delivery in list(self.deliveries.items()):
            if (delivery.group, delivery.topic) == (group, topic):
                del self.deliveries[key]
                event("delivery dropped by unsubscribe")

    def receive(self, group: str, max_messages: int) -> tuple[list[Delivery], list[Delivery]]:
        """The deliveries a receive hands out (oldest first), and those it dead-letters."""
        buried_all: list[Delivery] = []
        while True:
            available = sorted(
                (d for d in self.deliveries.values() if d.group == group and not d.in_flight),
                key=lambda d: d.seq,
            )[:max_messages]
            buried, claimed = [], []
            for delivery in available:
                limit = self.subscription(group, delivery.topic).max_delivery_attempts
                (buried if delivery.attempts >= limit else claimed).append(delivery)
            for delivery in buried:
                del self.deliveries[delivery.key]
                self.dead_letters.pop(delivery.key, None)
                self.dead_letters[delivery.key] = delivery.attempts
                event("dead-lettered")
            for delivery in claimed:
                delivery.attempts += 1
                delivery.in_flight = True
                delivery.handle = None  # the core issues the new one
                if delivery.attempts > 1:
                    event("redelivered")
            buried_all += buried
            if claimed or not buried:
                return claimed, buried_all

    def handle_outcome(self, group: str, handle: str) -> HandleOutcome:
        delivery = self.handles[handle]
        if delivery.group != group or self.deliveries.get(delivery.key) is not delivery:
            return "not_found"  # acked, dead-lettered, requeued anew, or another group's
        return "ok" if delivery.handle == handle else "stale"

    def ack(self, handle: str) -> None:
        delivery = self.handles[handle]
        del self.deliveries[delivery.key]
        self.acked.add(delivery.key)
        event("acked")

    def issue(self, delivery: Delivery, handle: str) -> None:
        assert handle not in self.handles, f"receipt handle {handle!r} was issued twice"
        delivery.handle = handle
        self.handles[handle] = delivery

    def requeue(self, group: str) -> int:
        # only while the group subscribes to the dead letter's topic
        requeued = [
            key
            for key in self.dead_letters
            if key[1] == group and self.subscribes(group, self.by_offset[key[0]].topic)
        ]
        if requeued:
            event("requeued dead letters")
        for key in requeued:
            del self.dead_letters[key]
            self._seq += 1
            self.deliveries[key] = Delivery(key[0], group, self.by_offset[key[0]].topic, self._seq)
        return len(requeued)

    # --- views ----------------------------------------------------------------

    def transactional(self) -> list[Message]:
        return [m for m in self.by_offset.values() if m.transaction_id is not None]

    def in_state(self, *states: MessageState) -> list[Message]:
        return [m for m in self.by_offset.values() if m.state in states]

    def received(self) -> list[Delivery]:
        """Deliveries with a current receipt handle (in flight, or whose duration ran out)."""
        return [d for d in self.deliveries.values() if d.handle is not None]
