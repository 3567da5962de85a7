"""The SQL92 filter parser: its trees, its refusals with positions, and that
any text gets a tree or InvalidFilterExpression, nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain.delivery import FilterType
from coordinator.domain.errors import InvalidFilterExpression, InvalidMessage
from coordinator.domain.rules import parse_filter
from coordinator.domain.sql92 import MAX_NESTING, SQL92_MAX_LENGTH, parse_sql92, render_sql92
from coordinator.domain.sql92_tokens import KEYWORDS
from tests.sql92_trees import filter_trees, names, numbers, prop, texts


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("a > 5", {"op": ">", "left": prop("a"), "right": {"number": "5"}}),
        ("a >= -2.5e3", {"op": ">=", "left": prop("a"), "right": {"number": "-2.5e3"}}),
        ("10L < a", {"op": "<", "left": {"number": "10"}, "right": prop("a")}),
        ("b = 'it''s'", {"op": "=", "left": prop("b"), "right": {"string": "it's"}}),
        ("b <> TRUE", {"op": "<>", "left": prop("b"), "right": {"boolean": True}}),
        (
            "a not between 1 and 2",
            {
                "op": "between",
                "value": prop("a"),
                "low": {"number": "1"},
                "high": {"number": "2"},
                "negated": True,
            },
        ),
        (
            "TAGS IN ('x', 'y')",
            {"op": "in", "value": prop("TAGS"), "values": ["x", "y"], "negated": False},
        ),
        ("a IS NOT NULL", {"op": "is_null", "value": prop("a"), "negated": True}),
        (
            "a NOT STARTSWITH 'pre'",
            {"op": "startswith", "value": prop("a"), "search": "pre", "negated": True},
        ),
        ("FALSE", {"op": "literal", "value": False}),
        (
            "NOT a = 1 AND b = 2 OR c = 3",
            {
                "op": "or",
                "args": [
                    {
                        "op": "and",
                        "args": [
                            {
                                "op": "not",
                                "arg": {"op": "=", "left": prop("a"), "right": {"number": "1"}},
                            },
                            {"op": "=", "left": prop("b"), "right": {"number": "2"}},
                        ],
                    },
                    {"op": "=", "left": prop("c"), "right": {"number": "3"}},
                ],
            },
        ),
        (
            "/* hi */ a = 1 -- the end",
            {"op": "=", "left": prop("a"), "right": {"number": "1"}},
        ),
    ],
)
def test_expressions_parse_to_their_trees(text: str, tree: dict[str, Any]) -> None:
    assert parse_sql92(text) == tree
    assert parse_sql92(render_sql92(tree)) == tree


@pytest.mark.parametrize(
    ("text", "position", "phrase"),
    [
        ("", 1, "expected a condition"),
        ("a", 1, "a alone is not a condition"),
        ("a >", 4, "found the end"),
        ("a > 'x'", 5, "compares numbers"),
        ("a = NULL", 5, "use IS [NOT] NULL"),
        ("a = 1 b = 2", 7, "expected AND, OR"),
        ("a = 'open", 5, "not closed"),
        ("a = 1 /* open", 7, "not closed"),
        ("a BETWEEN 5 AND 1", 11, "above its high bound"),
        ("'x' IN ('x')", 1, "IN applies to a property"),
        ("a IN (1)", 7, "string literals"),
        ("a CONTAINS b", 12, "string literal"),
        ("a NOT = 1", 7, "expected BETWEEN, IN"),
        ("(a = 1) = TRUE", 9, "cannot be compared"),
        ("a = 1 # 2", 7, "unexpected character '#'"),
        ("a = 5x", 6, "after a number"),
        ("a > 1e5000", 5, "exponent"),
        ("a > -b", 6, "number literal only"),
        ("a.b = 1", 2, "unexpected character '.'"),
    ],
)
def test_a_bad_expression_is_refused_at_its_position(text: str, position: int, phrase: str) -> None:
    with pytest.raises(InvalidFilterExpression) as refused:
        parse_sql92(text)
    assert refused.value.position == position
    assert f"at position {position}:" in refused.value.message
    assert phrase in refused.value.message


def test_nesting_and_length_are_bounded() -> None:
    deepest = "(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING
    parse_sql92(deepest)
    for too_deep in ("(" + deepest + ")", "NOT " * (MAX_NESTING + 1) + "a = 1", "(" * 4000):
        with pytest.raises(InvalidFilterExpression, match="nested more than"):
            parse_sql92(too_deep)
    with pytest.raises(InvalidFilterExpression, match="longer than"):
        parse_sql92("a = 1 OR " * (SQL92_MAX_LENGTH // 9) + "a = 1")


def test_parse_filter_keeps_tag_expressions_as_they_were() -> None:
    assert parse_filter(" TagA || TagB ") == (
        FilterType.TAG,
        "TagA || TagB",
        ("TagA", "TagB"),
        None,
    )
    assert parse_filter("") == (FilterType.TAG, "*", None, None)
    kind, text, tags, tree = parse_filter(" a = 1 ", "SQL92")
    assert (kind, text, tags) == (FilterType.SQL92, "a = 1", None)
    assert tree == parse_sql92("a = 1")
    with pytest.raises(InvalidMessage, match="'tag' or 'sql92'"):
        parse_filter("a = 1", "sql")


# --- any tree round-trips; any text parses or is refused ---------------------------------

trees = filter_trees(names, texts, numbers)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_a_rendered_tree_parses_back_to_itself_and_is_json(tree: dict) -> None:
    assert parse_sql92(render_sql92(tree)) == tree
    assert json.loads(json.dumps(tree)) == tree


WORDS = [*KEYWORDS, "a", "TAGS", "'x'", "'it''s'", "1", "-2.5", ".5e3", "10L"]
WORDS += ["=", "<>", "<", "<=", ">", ">=", "(", ")", ",", "+", "-", "--", "/*", "*/", "'", "."]


@settings(max_examples=300, deadline=None)
@given(st.one_of(texts, st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)))
def test_any_text_is_parsed_or_refused_with_a_position(text: str) -> None:
    try:
        tree = parse_sql92(text)
    except InvalidFilterExpression as refused:
        assert refused.position is not None and 1 <= refused.position <= len(text) + 1
    else:
        assert parse_sql92(render_sql92(tree)) == tree
