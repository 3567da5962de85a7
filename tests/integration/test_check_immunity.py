"""Check immunity, from the field or RocketMQ's CHECK_IMMUNITY_TIME_IN_SECONDS property:
held to leave one check interval before the message expires at the retention."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.immunity import CHECK_IMMUNITY_PROPERTY
from tests.factories import half

pytestmark = pytest.mark.anyio

# A retention of one hour and a check interval of a minute: at most 3540 s.
LONGEST = 3540.0


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url=None, retention_hours=1, check_interval_seconds=60)


def _first_check_after(db: psycopg.Connection, offset: int) -> timedelta:
    (after,) = db.execute(
        "SELECT next_check_at - born_at FROM messages WHERE id = %s", (offset,)
    ).fetchone()
    return after


def _immunity(seconds: str) -> dict[str, str]:
    return {CHECK_IMMUNITY_PROPERTY: seconds}


async def test_an_immunity_leaving_one_check_interval_before_expiry_is_accepted(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half(check_immunity_seconds=LONGEST))
    assert _first_check_after(db, sent.offset) == timedelta(seconds=LONGEST)


async def test_an_immunity_leaving_less_than_one_check_interval_is_refused(
    core: Coordinator, db: psycopg.Connection
) -> None:
    with pytest.raises(InvalidMessage, match="at most 3540 s") as refused:
        await core.transactions.prepare(half(check_immunity_seconds=LONGEST + 0.5))
    assert "checked back at least once before it expires" in refused.value.message
    with pytest.raises(InvalidMessage, match="message 1: check immunity of 3600 s"):
        await core.transactions.prepare_batch([half(), half(check_immunity_seconds=3600)])
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (0,)


async def test_the_property_sets_the_immunity_within_the_same_bounds(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half(properties=_immunity("90")))
    assert _first_check_after(db, sent.offset) == timedelta(seconds=90)
    (batched,) = await core.transactions.prepare_batch([half(properties=_immunity("3540"))])
    assert _first_check_after(db, batched.offset) == timedelta(seconds=LONGEST)
    record = await core.inspection.get_message(offset=sent.offset)
    assert record.properties == _immunity("90")  # kept as the producer sent it
    for value, words in [
        ("3541", "at most 3540 s"),
        ("0", "positive"),
        ("-5", CHECK_IMMUNITY_PROPERTY),
        ("soon", CHECK_IMMUNITY_PROPERTY),
        ("", CHECK_IMMUNITY_PROPERTY),
        ("1e3", CHECK_IMMUNITY_PROPERTY),
    ]:
        with pytest.raises(InvalidMessage, match=words):
            await core.transactions.prepare(half(properties=_immunity(value)))
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (2,)


async def test_the_field_wins_over_the_property(core: Coordinator, db: psycopg.Connection) -> None:
    sent = await core.transactions.prepare(
        half(check_immunity_seconds=30, properties=_immunity("120"))
    )
    assert _first_check_after(db, sent.offset) == timedelta(seconds=30)


async def test_a_normal_message_keeps_the_property_as_a_plain_user_property(
    core: Coordinator,
) -> None:
    sent = await core.transactions.send(half(producer_group=None, properties=_immunity("soon")))
    record = await core.inspection.get_message(offset=sent.offset)
    assert record.properties == _immunity("soon") and record.check_immunity is None
