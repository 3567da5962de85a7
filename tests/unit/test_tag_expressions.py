"""RocketMQ tag filter expressions: parsed once, matched in SQL."""

from __future__ import annotations

import pytest

from coordinator.domain.errors import InvalidMessage
from coordinator.domain.rules import delivery_id_of, parse_tag_expression


@pytest.mark.parametrize(
    ("expression", "tags"),
    [
        ("*", None),
        ("  *  ", None),
        ("", None),
        (None, None),
        ("TagA", ("TagA",)),
        ("TagA || TagB", ("TagA", "TagB")),
        ("TagA||TagB||TagA", ("TagA", "TagB")),
        ("  spaced tag || x ", ("spaced tag", "x")),
    ],
)
def test_expressions_parse(expression: str | None, tags: tuple[str, ...] | None) -> None:
    assert parse_tag_expression(expression) == tags


@pytest.mark.parametrize(
    ("expression", "phrase"),
    [
        ("TagA ||", "empty tag"),
        ("|| TagA", "empty tag"),
        ("TagA |||| TagB", "empty tag"),
        ("TagA || *", "cannot be combined"),
        ("TagA | TagB", "'|'"),
        ("x" * 300, "longer than 255"),
        ("a\x00b", "NUL"),
        ("a || " * 2000, "longer than 4096"),
    ],
)
def test_bad_expressions_are_refused(expression: str, phrase: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        parse_tag_expression(expression)
    assert phrase in refused.value.message


def test_receipt_handles_carry_their_delivery_id() -> None:
    assert delivery_id_of("42." + "ab" * 16) == 42
    for forged in ("42", "42." + "AB" * 16, "0." + "ab" * 16, "x.y", "42." + "ab" * 15):
        with pytest.raises(InvalidMessage, match="receipt handle"):
            delivery_id_of(forged)
