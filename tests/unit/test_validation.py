"""Input rules, without a database."""

from __future__ import annotations

import pytest

from coordinator.config import Settings
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.messages import NewMessage
from coordinator.domain.rules import check_name, check_new_message, check_seconds, check_topic

SETTINGS = Settings()


@pytest.mark.parametrize("name", ["orders", "a", "A-b_c%d|e", "x" * 127, "0123"])
def test_rocketmq_names_are_accepted(name: str) -> None:
    assert check_name("topic", name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "required"),
        (None, "required"),
        ("x" * 128, "at most 127"),
        ("with space", "not allowed"),
        ("dot.ted", "not allowed"),
        ("ünicode", "not allowed"),
        ("semi;colon", "not allowed"),
    ],
)
def test_bad_names_are_refused_with_the_reason(name: str | None, reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason):
        check_name("topic", name)


@pytest.mark.parametrize(
    "topic", ["RMQ_SYS_TRANS_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "TBW102"]
)
def test_system_topics_are_reserved(topic: str) -> None:
    with pytest.raises(InvalidMessage, match="reserved"):
        check_topic(topic)


def _message(**overrides: object) -> NewMessage:
    values: dict = {"topic": "orders", "body": b"x", "producer_group": "g"}
    values.update(overrides)
    return NewMessage(**values)


def test_a_plain_half_message_is_valid() -> None:
    check_new_message(_message(), SETTINGS, transactional=True)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"body": b""}, "empty"),
        ({"body": b"x" * (SETTINGS.max_body_bytes + 1)}, "at most 4194304"),
        ({"tags": " "}, "blank"),
        ({"tags": "a|b"}, "'\\|'"),
        ({"tags": "a\x00"}, "NUL"),
        ({"tags": "a\ud800"}, "valid UTF-8"),
        ({"keys": ("k\udfff",)}, "valid UTF-8"),
        ({"properties": {"p": "\ud800"}}, "valid UTF-8"),
        ({"message_group": "g\ud800"}, "valid UTF-8"),
        ({"keys": ("",)}, "non-empty"),
        ({"keys": ("a b",)}, "whitespace"),
        ({"keys": tuple(str(i) for i in range(65))}, "at most 64"),
        ({"properties": {"": "v"}}, "empty"),
        ({"properties": {"k": 1}}, "strings"),
        ({"message_id": "has space"}, "not valid"),
        ({"message_id": "x" * 129}, "not valid"),
        ({"message_group": ""}, "empty"),
        ({"check_immunity_seconds": 0}, "positive"),
        ({"check_immunity_seconds": float("nan")}, "positive"),
        ({"producer_group": None}, "required"),
    ],
)
def test_invalid_half_messages_are_refused(overrides: dict, reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason):
        check_new_message(_message(**overrides), SETTINGS, transactional=True)


def test_normal_messages_need_no_producer_group_and_take_no_immunity() -> None:
    check_new_message(_message(producer_group=None), SETTINGS, transactional=False)
    with pytest.raises(InvalidMessage, match="transactional messages only"):
        check_new_message(_message(check_immunity_seconds=5), SETTINGS, transactional=False)


def test_limits_follow_the_settings() -> None:
    small = Settings(max_body_bytes=10, max_properties_bytes=4)
    with pytest.raises(InvalidMessage, match="at most 10"):
        check_new_message(_message(body=b"x" * 11), small, transactional=True)
    with pytest.raises(InvalidMessage, match="at most 4"):
        check_new_message(_message(properties={"ab": "cde"}), small, transactional=True)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_seconds_that_are_not_finite_are_refused_as_such(value: float) -> None:
    with pytest.raises(InvalidMessage, match="must be a finite number of seconds"):
        check_seconds("invisible_seconds", value, low=0, high=43200, allow_zero=False)
