"""Hypothesis strategies of SQL92 filter trees: what coordinator.domain.sql92 parses to."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import strategies as st

from coordinator.domain.sql92_tokens import KEYWORDS


def prop(name: str) -> dict[str, str]:
    return {"property": name}


names = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,6}", fullmatch=True).filter(
    lambda name: name.upper() not in KEYWORDS
)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
numbers = st.from_regex(
    r"-?([0-9]{1,4}(\.[0-9]{0,3})?|\.[0-9]{1,3})([eE][+-]?[0-9]{1,3})?", fullmatch=True
)


def _between(value: dict, low: dict, high: dict, negated: bool) -> dict:
    return {"op": "between", "value": value, "low": low, "high": high, "negated": negated}


def _ordered(tree: dict) -> bool:
    low, high = tree["low"].get("number"), tree["high"].get("number")
    return low is None or high is None or Decimal(low) <= Decimal(high)


def filter_trees(
    names: st.SearchStrategy[str], texts: st.SearchStrategy[str], numbers: st.SearchStrategy[str]
) -> st.SearchStrategy[dict]:
    """Trees parse_sql92 can give, over these property names, strings and numbers."""
    properties = names.map(prop)
    strings = texts.map(lambda text: {"string": text})
    numeric = st.one_of(properties, numbers.map(lambda n: {"number": n}))
    values = st.one_of(properties, strings, numeric, st.booleans().map(lambda b: {"boolean": b}))
    values_or_null = st.one_of(values, st.just({"null": True}))

    predicates = st.one_of(
        st.builds(
            lambda op, left, right: {"op": op, "left": left, "right": right},
            st.sampled_from(["=", "<>"]),
            values,
            values,
        ),
        st.builds(
            lambda op, left, right: {"op": op, "left": left, "right": right},
            st.sampled_from(["<", "<=", ">", ">="]),
            numeric,
            numeric,
        ),
        st.builds(_between, numeric, numeric, numeric, st.booleans()).filter(_ordered),
        st.builds(
            lambda value, items, negated: {
                "op": "in",
                "value": value,
                "values": items,
                "negated": negated,
            },
            properties,
            st.lists(texts, min_size=1, max_size=3),
            st.booleans(),
        ),
        st.builds(
            lambda value, negated: {"op": "is_null", "value": value, "negated": negated},
            values_or_null,
            st.booleans(),
        ),
        st.builds(
            lambda op, value, search, negated: {
                "op": op,
                "value": value,
                "search": search,
                "negated": negated,
            },
            st.sampled_from(["contains", "startswith", "endswith"]),
            values_or_null,
            texts,
            st.booleans(),
        ),
        st.sampled_from([True, False, None]).map(lambda v: {"op": "literal", "value": v}),
    )
    return st.recursive(
        predicates,
        lambda children: st.one_of(
            children.map(lambda child: {"op": "not", "arg": child}),
            st.builds(
                lambda op, args: {"op": op, "args": args},
                st.sampled_from(["and", "or"]),
                st.lists(children, min_size=2, max_size=3),
            ),
        ),
        max_leaves=8,
    )
