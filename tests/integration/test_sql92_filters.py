"""SQL92 filters against real PostgreSQL: the function the fan-out calls
(sql92_matches) case by case, and subscriptions through the core that
receive only the messages their condition selects."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core import Coordinator
from coordinator.domain.delivery import FilterType
from coordinator.domain.errors import InvalidFilterExpression
from coordinator.domain.sql92 import MAX_NESTING, parse_sql92
from coordinator.domain.states import Resolution
from tests.factories import TOPIC, end, half
from tests.sql92_trees import filter_trees

GROUP = "billing"
EU_BIG = {"region": "eu", "amount": "150"}

# (expression, the message's properties, its tag, whether it is delivered)
CASES: list[tuple[str, dict[str, str], str | None, bool]] = [
    # numbers: compared as numbers, also against properties written as decimals
    ("amount > 100", EU_BIG, None, True),
    ("amount > 100", {"amount": "99.5"}, None, False),
    ("amount >= 150", EU_BIG, None, True),
    ("amount < 1e3", EU_BIG, None, True),
    ("amount <= -1", {"amount": "-1.0"}, None, True),
    ("amount = 150", {"amount": "150.00"}, None, True),
    ("amount <> 150", {"amount": "151"}, None, True),
    ("amount BETWEEN 100 AND 200", EU_BIG, None, True),
    ("amount BETWEEN 151 AND 200", EU_BIG, None, False),
    ("amount NOT BETWEEN 151 AND 200", EU_BIG, None, True),
    # a value that is not a number makes a numeric comparison unknown
    ("amount > 100", {"amount": "lots"}, None, False),
    ("NOT amount > 100", {"amount": "lots"}, None, False),
    ("amount = 5", {"amount": "5x"}, None, False),
    ("amount > 100", {"amount": "1" * 2000}, None, False),
    # strings
    ("region = 'eu'", EU_BIG, None, True),
    ("region = 'EU'", EU_BIG, None, False),
    ("region <> 'us'", EU_BIG, None, True),
    ("region IN ('us', 'eu')", EU_BIG, None, True),
    ("region NOT IN ('us', 'eu')", EU_BIG, None, False),
    ("region NOT IN ('us')", EU_BIG, None, True),
    ("name = 'O''Brien'", {"name": "O'Brien"}, None, True),
    ("region = amount", {"region": "7", "amount": "7"}, None, True),
    ("'eu' = region", EU_BIG, None, True),
    # a missing property: every comparison with it is unknown, its NOT too
    ("missing = 'x'", EU_BIG, None, False),
    ("missing <> 'x'", EU_BIG, None, False),
    ("NOT missing = 'x'", EU_BIG, None, False),
    ("missing > 1", EU_BIG, None, False),
    ("missing IN ('x')", EU_BIG, None, False),
    ("missing NOT IN ('x')", EU_BIG, None, False),
    ("missing BETWEEN 1 AND 2", EU_BIG, None, False),
    ("missing NOT BETWEEN 1 AND 2", EU_BIG, None, False),
    ("missing IS NULL", EU_BIG, None, True),
    ("missing IS NOT NULL", EU_BIG, None, False),
    ("region IS NOT NULL", EU_BIG, None, True),
    # unknown in AND / OR: SQL's three-valued logic
    ("missing = 'x' OR region = 'eu'", EU_BIG, None, True),
    ("missing = 'x' AND region = 'eu'", EU_BIG, None, False),
    ("NOT (missing = 'x' AND region = 'us')", EU_BIG, None, True),
    ("NOT (missing = 'x' OR region = 'us')", EU_BIG, None, False),
    # TAGS is the message's tag
    ("TAGS = 'paid'", {}, "paid", True),
    ("TAGS IN ('created', 'paid') AND amount > 100", EU_BIG, "paid", True),
    ("TAGS = 'paid'", {}, None, False),
    ("TAGS IS NULL", {}, None, True),
    # booleans and constants
    ("flag = TRUE", {"flag": "True"}, None, True),
    ("flag = FALSE", {"flag": "yes"}, None, True),
    ("TRUE", {}, None, True),
    ("FALSE", {}, None, False),
    ("NULL", {}, None, False),
    ("NOT FALSE AND TRUE", {}, None, True),
    # text matches: false (also NOT ...) for a missing property, as in RocketMQ
    ("region CONTAINS 'u'", EU_BIG, None, True),
    ("region STARTSWITH 'e'", EU_BIG, None, True),
    ("region ENDSWITH 'e'", EU_BIG, None, False),
    ("region NOT ENDSWITH 'e'", EU_BIG, None, True),
    ("missing NOT CONTAINS 'x'", EU_BIG, None, False),
    ("region CONTAINS ''", EU_BIG, None, False),
    # precedence: AND before OR, NOT before AND
    ("region = 'us' AND amount > 1 OR amount = 150", EU_BIG, None, True),
    ("region = 'us' AND (amount > 1 OR amount = 150)", EU_BIG, None, False),
    ("NOT region = 'us' AND amount = 150", EU_BIG, None, True),
]


def matches(db: psycopg.Connection, expression: str, properties: dict, tags: str | None) -> bool:
    row = db.execute(
        "SELECT sql92_matches(%s::jsonb, %s::text, %s::jsonb)",
        (json.dumps(parse_sql92(expression)), tags, json.dumps(properties)),
    ).fetchone()
    assert row is not None
    return row[0]


def test_sql92_matches_evaluates_each_case_as_rocketmq_does(db: psycopg.Connection) -> None:
    wrong = [
        f"{expression!r} with {properties} tag {tags!r}: expected {expected}"
        for expression, properties, tags, expected in CASES
        if matches(db, expression, properties, tags) is not expected
    ]
    assert not wrong, "\n".join(wrong)


def test_the_deepest_filter_allowed_evaluates(db: psycopg.Connection) -> None:
    deepest = "(" * (MAX_NESTING - 1) + "NOT region = 'us'" + ")" * (MAX_NESTING - 1)
    assert matches(db, deepest, EU_BIG, None)
    with pytest.raises(InvalidFilterExpression):
        parse_sql92("(" + deepest + ")")


# --- the SQL function against a model of the documented semantics ---------------------

_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")


def _text(value: dict[str, Any], tags: str | None, properties: dict[str, str]) -> str | None:
    if "property" in value:
        name = value["property"]
        return tags if name == "TAGS" else properties.get(name)
    if "boolean" in value:
        return "true" if value["boolean"] else "false"
    return value.get("string", value.get("number"))


def _kind(value: dict[str, Any]) -> str:
    return "number" if "number" in value else "boolean" if "boolean" in value else "string"


def _number(text: str | None) -> Decimal | None:
    ok = text is not None and len(text) <= 1000 and _DECIMAL.fullmatch(text)
    return Decimal(text) if ok else None  # type: ignore[arg-type]


def _not(result: bool | None) -> bool | None:
    return None if result is None else not result


def _equal(node: dict[str, Any], tags: str | None, properties: dict[str, str]) -> bool | None:
    left, right = node["left"], node["right"]
    left_text, right_text = _text(left, tags, properties), _text(right, tags, properties)
    if left_text is None or right_text is None:
        return None
    kinds = {_kind(left), _kind(right)}
    if kinds == {"string"} or kinds == {"boolean"}:
        return left_text == right_text
    if kinds == {"string", "boolean"}:
        text, flag = (left_text, right_text) if _kind(left) == "string" else (right_text, left_text)
        return (text.lower() == "true") == (flag == "true")
    if "boolean" in kinds:
        return False
    a, b = _number(left_text), _number(right_text)
    return None if a is None or b is None else a == b


def evaluate(node: dict[str, Any], tags: str | None, properties: dict[str, str]) -> bool | None:
    """What docs/consuming.md says a condition is: True, False or unknown (None)."""
    op = node["op"]
    if op in ("and", "or"):
        results = [evaluate(arg, tags, properties) for arg in node["args"]]
        decisive = op == "or"  # True decides an OR, False an AND
        if decisive in results:
            return decisive
        return None if None in results else not decisive
    if op == "not":
        return _not(evaluate(node["arg"], tags, properties))
    if op == "literal":
        return node["value"]
    if op in ("=", "<>"):
        result = _equal(node, tags, properties)
        return result if op == "=" else _not(result)
    if op in ("<", "<=", ">", ">="):
        a = _number(_text(node["left"], tags, properties))
        b = _number(_text(node["right"], tags, properties))
        if a is None or b is None:
            return None
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    value = _text(node["value"], tags, properties)
    if op == "between":
        v = _number(value)
        low = _number(_text(node["low"], tags, properties))
        high = _number(_text(node["high"], tags, properties))
        above = None if v is None or low is None else v >= low
        below = None if v is None or high is None else v <= high
        result = evaluate(
            {
                "op": "and",
                "args": [{"op": "literal", "value": above}, {"op": "literal", "value": below}],
            },
            tags,
            properties,
        )
    elif op == "in":
        result = None if value is None else value in node["values"]
    elif op == "is_null":
        result = value is None
    else:
        search = node["search"]
        if value is None or not search or _kind(node["value"]) != "string":
            return False
        result = {
            "contains": search in value,
            "startswith": value.startswith(search),
            "endswith": value.endswith(search),
        }[op]
    return _not(result) if node["negated"] else result


SAMPLES = ["1", "2.5", "-3", "1e3", "100", "x", "", "true", "TRUE", "abc", "5x"]
small_trees = filter_trees(
    st.sampled_from(["a", "b", "TAGS"]),
    st.sampled_from([*SAMPLES[5:], "b", "ab"]),
    st.sampled_from([*SAMPLES[:5], "0", "-1.5e2"]),
)
messages = st.tuples(
    st.one_of(st.none(), st.sampled_from(SAMPLES)),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(SAMPLES), max_size=3),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=small_trees, message=messages)
def test_sql92_matches_agrees_with_the_documented_semantics(
    db: psycopg.Connection, tree: dict[str, Any], message: tuple[str | None, dict[str, str]]
) -> None:
    tags, properties = message
    row = db.execute(
        "SELECT sql92_eval(%s::jsonb, %s::text, %s::jsonb),"
        " sql92_matches(%s::jsonb, %s::text, %s::jsonb)",
        (json.dumps(tree), tags, json.dumps(properties)) * 2,
    ).fetchone()
    assert row is not None
    expected = evaluate(tree, tags, properties)
    assert row == (expected, expected is True), (tree, tags, properties)


async def commit(core: Coordinator, body: bytes, **fields: object) -> None:
    sent = await core.transactions.prepare(half(body=body, **fields))
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))


@pytest.mark.anyio
async def test_a_sql92_subscription_receives_only_the_messages_it_selects(
    core: Coordinator,
) -> None:
    result = await core.delivery.subscribe(
        GROUP, TOPIC, "  region = 'eu' AND amount > 100 ", filter_type="sql92"
    )
    assert result.subscription.filter_type is FilterType.SQL92
    assert result.subscription.expression == "region = 'eu' AND amount > 100"
    assert result.subscription.tags is None
    await core.delivery.subscribe("everyone", TOPIC)  # tag '*' beside it, unchanged
    await commit(core, b"big eu", properties=EU_BIG)
    await commit(core, b"small eu", properties={"region": "eu", "amount": "5"})
    await commit(core, b"no properties")
    await commit(core, b"big us", tags="paid", properties={"region": "us", "amount": "900"})

    got = await core.delivery.receive(GROUP, max_messages=10)
    assert [m.body for m in got] == [b"big eu"]
    everyone = await core.delivery.receive("everyone", max_messages=10)
    assert len(everyone) == 4

    # Back to a tag filter: the next commits are matched by tag again.
    changed = await core.delivery.ensure_subscribed(GROUP, TOPIC, "paid")
    assert (changed.filter_type, changed.tags) == (FilterType.TAG, ("paid",))
    await commit(core, b"paid", tags="paid", properties={"amount": "1"})
    await commit(core, b"big eu again", properties=EU_BIG)
    assert [m.body for m in await core.delivery.receive(GROUP, max_messages=10)] == [b"paid"]


@pytest.mark.anyio
async def test_a_bad_sql92_expression_is_refused_with_its_position(core: Coordinator) -> None:
    with pytest.raises(InvalidFilterExpression) as refused:
        await core.delivery.subscribe(GROUP, TOPIC, "amount > 'ten'", filter_type="sql92")
    assert refused.value.position == 10
    assert "position 10" in refused.value.message
    with pytest.raises(InvalidFilterExpression):
        await core.delivery.ensure_subscribed(GROUP, TOPIC, "a = ", filter_type=FilterType.SQL92)
    assert await core.delivery.subscriptions(GROUP) == []
