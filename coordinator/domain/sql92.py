"""SQL92 filter expressions (RocketMQ's message selectors): parse, check, render.

A subscription may filter by a condition over the message's user
properties and its tag (the property `TAGS`), in the grammar of RocketMQ's
filter module (SelectorParser.jj): comparisons, `[NOT] BETWEEN`, `[NOT] IN`,
`IS [NOT] NULL`, `[NOT] CONTAINS` / `STARTSWITH` / `ENDSWITH`, `AND`, `OR`,
`NOT`, parentheses, string and numeric literals, `TRUE`, `FALSE`, `NULL`.
Keywords are case-insensitive, property names are not.

`parse_sql92` turns the text into a small tree of JSON values (dicts, lists,
strings, booleans); the database evaluates that tree with the function
`sql92_matches` at fan-out, so the user's text is never part of any SQL.
`render_sql92` writes a tree back as text that parses to the same tree.

Nodes, each a dict with an "op":
  {"op": "and" | "or", "args": [condition, ...]}      two or more
  {"op": "not", "arg": condition}
  {"op": "literal", "value": true | false | null}     a constant condition
  {"op": "=" | "<>" | "<" | "<=" | ">" | ">=", "left": value, "right": value}
  {"op": "between", "value": v, "low": v, "high": v, "negated": bool}
  {"op": "in", "value": property, "values": [str, ...], "negated": bool}
  {"op": "is_null", "value": v, "negated": bool}
  {"op": "contains" | "startswith" | "endswith", "value": v, "search": str,
   "negated": bool}
Values: {"property": name} | {"string": text} | {"number": "decimal text"}
| {"boolean": bool} | {"null": true} (only under is_null). Numbers stay
text so that no precision is lost on the way to PostgreSQL's numeric.

Where this differs from RocketMQ, on purpose: NOT binds looser than a
comparison, as in SQL (`NOT a = 'x'` is `NOT (a = 'x')`; RocketMQ negates
`a` alone, which can never match); a property alone is not a condition
(RocketMQ casts it to a boolean that is never true); `+` and `-` apply to
number literals only. (At evaluation, in sql92_matches: a comparison that
cannot be made, a text against a number, is unknown where RocketMQ fails
the whole expression.)
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from coordinator.domain.errors import InvalidFilterExpression
from coordinator.domain.sql92_tokens import Token, fail, tokenize

SQL92_MAX_LENGTH = 4096
# Parentheses and NOTs nested deeper than this are refused: the parser and
# the database's evaluation both recurse once per level.
MAX_NESTING = 64
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")
ORDERINGS = frozenset({"<", "<=", ">", ">="})
TEXT_MATCHES = ("CONTAINS", "STARTSWITH", "ENDSWITH")


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.at = 0
        self.depth = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def is_keyword(self, *words: str) -> bool:
        return self.token.kind == "keyword" and self.token.text in words

    def is_symbol(self, *symbols: str) -> bool:
        return self.token.kind == "symbol" and self.token.text in symbols

    def expect_keyword(self, word: str) -> None:
        if not self.is_keyword(word):
            raise self.unexpected(f"expected {word}")
        self.take()

    def expect_symbol(self, symbol: str) -> None:
        if not self.is_symbol(symbol):
            raise self.unexpected(f"expected '{symbol}'")
        self.take()

    def unexpected(self, problem: str) -> InvalidFilterExpression:
        token = self.token
        found = "the end" if token.kind == "end" else repr(self.source_of(token))
        return fail(token.position, f"{problem}, found {found}")

    @staticmethod
    def source_of(token: Token) -> str:
        if token.kind == "string":
            return "'" + token.text.replace("'", "''") + "'"
        return token.text

    def nested(self, position: int) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise fail(position, f"conditions are nested more than {MAX_NESTING} deep")

    # --- conditions ------------------------------------------------------------
    def expression(self) -> dict[str, Any]:
        condition = self.disjunction()
        if self.token.kind != "end":
            raise self.unexpected("expected AND, OR or the end of the expression")
        return condition

    def disjunction(self) -> dict[str, Any]:
        args = [self.conjunction()]
        while self.is_keyword("OR"):
            self.take()
            args.append(self.conjunction())
        return args[0] if len(args) == 1 else {"op": "or", "args": args}

    def conjunction(self) -> dict[str, Any]:
        args = [self.negation()]
        while self.is_keyword("AND"):
            self.take()
            args.append(self.negation())
        return args[0] if len(args) == 1 else {"op": "and", "args": args}

    def negation(self) -> dict[str, Any]:
        if self.is_keyword("NOT"):
            self.nested(self.take().position)
            condition = {"op": "not", "arg": self.negation()}
            self.depth -= 1
            return condition
        return self.predicate()

    def predicate(self) -> dict[str, Any]:
        if self.is_symbol("("):
            self.nested(self.take().position)
            condition = self.disjunction()
            self.expect_symbol(")")
            self.depth -= 1
            if self.is_symbol(*COMPARISONS) or self.is_keyword(
                "IS", "BETWEEN", "IN", *TEXT_MATCHES
            ):
                raise self.unexpected("a condition in parentheses cannot be compared")
            return condition
        start = self.token
        value = self.value("expected a condition: a comparison, NOT or '('")
        if self.is_symbol(*COMPARISONS):
            op = self.take()
            right_start = self.token
            right = self.value()
            if op.text in ORDERINGS:
                self.numeric(value, start, op.text)
                self.numeric(right, right_start, op.text)
            else:
                self.comparable(value, start, op.text)
                self.comparable(right, right_start, op.text)
            return {"op": op.text, "left": value, "right": right}
        if self.is_keyword("IS"):
            self.take()
            negated = self.is_keyword("NOT")
            if negated:
                self.take()
            self.expect_keyword("NULL")
            return {"op": "is_null", "value": _value_of(value), "negated": negated}
        negated = self.is_keyword("NOT")
        if negated:
            self.take()
        if self.is_keyword("BETWEEN"):
            return self.between(value, start, negated)
        if self.is_keyword("IN"):
            return self.in_list(value, start, negated)
        if self.is_keyword(*TEXT_MATCHES):
            matching = self.take().text.lower()
            search = self.string_literal(f"{matching.upper()} takes a string literal")
            return {"op": matching, "value": _value_of(value), "search": search, "negated": negated}
        if negated:
            raise self.unexpected("expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH")
        if "constant" in value:
            return {"op": "literal", "value": value["constant"]}
        raise fail(
            start.position,
            f"{self.source_of(start)} alone is not a condition; compare it, "
            f"e.g. {self.source_of(start)} = 'x'",
        )

    def between(self, value: dict[str, Any], start: Token, negated: bool) -> dict[str, Any]:
        self.take()
        low_start = self.token
        low = self.value()
        self.expect_keyword("AND")
        high_start = self.token
        high = self.value()
        for operand, where in ((value, start), (low, low_start), (high, high_start)):
            self.numeric(operand, where, "BETWEEN")
        bounds = low.get("number"), high.get("number")
        if (
            bounds[0] is not None
            and bounds[1] is not None
            and Decimal(bounds[0]) > Decimal(bounds[1])
        ):
            raise fail(
                low_start.position,
                f"BETWEEN's low bound {low['number']} is above its high bound {high['number']}",
            )
        return {"op": "between", "value": value, "low": low, "high": high, "negated": negated}

    def in_list(self, value: dict[str, Any], start: Token, negated: bool) -> dict[str, Any]:
        if "property" not in value:
            raise fail(start.position, "IN applies to a property, e.g. a IN ('x', 'y')")
        self.take()
        self.expect_symbol("(")
        values = [self.string_literal("IN lists string literals")]
        while self.is_symbol(","):
            self.take()
            values.append(self.string_literal("IN lists string literals"))
        self.expect_symbol(")")
        return {"op": "in", "value": value, "values": values, "negated": negated}

    def string_literal(self, problem: str) -> str:
        if self.token.kind != "string":
            raise self.unexpected(problem)
        return self.take().text

    # --- values ----------------------------------------------------------------
    def value(self, problem: str = "expected a property or a literal") -> dict[str, Any]:
        """A property or a literal; NULL, TRUE and FALSE as {"constant": ...} until placed."""
        token = self.take()
        if token.kind == "name":
            return {"property": token.text}
        if token.kind == "string":
            return {"string": token.text}
        if token.kind == "number":
            return {"number": token.text}
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE", "NULL"):
            return {"constant": {"TRUE": True, "FALSE": False, "NULL": None}[token.text]}
        if token.kind == "symbol" and token.text in "+-":
            negative = token.text == "-"
            while self.is_symbol("+", "-"):
                negative ^= self.take().text == "-"
            if self.token.kind != "number":
                raise self.unexpected(f"'{token.text}' applies to a number literal only")
            number = self.take().text
            return {"number": "-" + number if negative else number}
        self.at -= 1
        raise self.unexpected(problem)

    def numeric(self, value: dict[str, Any], where: Token, op: str) -> None:
        if "property" in value or "number" in value:
            return
        raise fail(
            where.position,
            f"{op} compares numbers; {self.source_of(where)} is not a number or a property",
        )

    def comparable(self, value: dict[str, Any], where: Token, op: str) -> None:
        if value.get("constant", False) is None:
            raise fail(where.position, f"NULL cannot be compared with '{op}'; use IS [NOT] NULL")
        if "constant" in value:
            value["boolean"] = value.pop("constant")


def _value_of(value: dict[str, Any]) -> dict[str, Any]:
    """A parsed value as a tree value: a TRUE/FALSE/NULL constant in a comparison's place."""
    if "constant" not in value:
        return value
    constant = value["constant"]
    return {"null": True} if constant is None else {"boolean": constant}


def parse_sql92(expression: str) -> dict[str, Any]:
    """The tree of a SQL92 filter expression; InvalidFilterExpression with a position if bad."""
    if len(expression) > SQL92_MAX_LENGTH:
        raise InvalidFilterExpression(
            f"the SQL92 filter expression is longer than {SQL92_MAX_LENGTH} characters", None
        )
    if "\x00" in expression:
        raise fail(expression.index("\x00") + 1, "unexpected character '\\x00'")
    try:
        expression.encode()
    except UnicodeEncodeError as error:
        raise fail(error.start + 1, "the text is not valid UTF-8") from None
    return _Parser(expression).expression()


# --- rendering ------------------------------------------------------------------
def render_sql92(node: dict[str, Any]) -> str:
    """Text that parses back to `node` (for a tree from parse_sql92)."""
    op = node["op"]
    if op in ("and", "or"):
        return f" {op.upper()} ".join(_grouped(arg, op) for arg in node["args"])
    if op == "not":
        return "NOT " + _grouped(node["arg"], "not")
    if op == "literal":
        return _constant(node["value"])
    not_ = "NOT " if node.get("negated") else ""
    value = _render_value(node.get("value", node.get("left", {})))
    if op in COMPARISONS:
        return f"{value} {op} {_render_value(node['right'])}"
    if op == "between":
        low, high = _render_value(node["low"]), _render_value(node["high"])
        return f"{value} {not_}BETWEEN {low} AND {high}"
    if op == "in":
        return f"{value} {not_}IN ({', '.join(_quoted(v) for v in node['values'])})"
    if op == "is_null":
        return f"{value} IS {not_}NULL"
    return f"{value} {not_}{op.upper()} {_quoted(node['search'])}"


def _grouped(node: dict[str, Any], parent: str) -> str:
    text = render_sql92(node)
    if node["op"] in ("and", "or") and (parent != "or" or node["op"] == "or"):
        return f"({text})"
    return text


def _render_value(value: dict[str, Any]) -> str:
    if "property" in value:
        return str(value["property"])
    if "string" in value:
        return _quoted(value["string"])
    if "number" in value:
        return str(value["number"])
    if "null" in value:
        return "NULL"
    return _constant(value["boolean"])


def _constant(value: bool | None) -> str:
    return "NULL" if value is None else ("TRUE" if value else "FALSE")


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
