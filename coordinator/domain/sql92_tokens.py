"""The tokens of a SQL92 filter expression (RocketMQ's selector grammar).

Whitespace, `--` and `/* */` comments between tokens; keywords in any case;
names of properties as RocketMQ's ID token (`[A-Za-z_$][A-Za-z0-9_$]*`);
strings in single quotes, a quote doubled inside; numbers with an optional
fraction, exponent and (whole numbers) `L` suffix. Every token carries the
1-based character where it starts, for the sentence of an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.domain.errors import InvalidFilterExpression

# A number literal's exponent stays within what PostgreSQL's numeric takes.
MAX_EXPONENT = 1000

KEYWORDS = frozenset(
    {
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)

_SPACE = " \t\n\r\f"
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUMBER = re.compile(
    r"(?P<mantissa>[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?P<exponent>[eE][+-]?[0-9]+)?(?P<long>[lL])?"
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "name", "keyword", "string", "number", "symbol", "end"
    text: str  # keywords upper-cased, strings unquoted
    position: int  # 1-based character where it starts


def fail(position: int, problem: str) -> InvalidFilterExpression:
    return InvalidFilterExpression(
        f"SQL92 filter expression, at position {position}: {problem}", position
    )


def _skip_space(text: str, at: int) -> int:
    while at < len(text):
        if text[at] in _SPACE:
            at += 1
        elif text.startswith("--", at):
            end = text.find("\n", at)
            at = len(text) if end < 0 else end + 1
        elif text.startswith("/*", at):
            end = text.find("*/", at + 2)
            if end < 0:
                raise fail(at + 1, "the comment that starts here is not closed with '*/'")
            at = end + 2
        else:
            break
    return at


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    at = _skip_space(text, 0)
    while at < len(text):
        char = text[at]
        if char == "'":
            value, end = _string(text, at)
            tokens.append(Token("string", value, at + 1))
            at = end
        elif (match := _NUMBER.match(text, at)) is not None:
            tokens.append(Token("number", _number_text(match, at + 1), at + 1))
            at = match.end()
            if at < len(text) and (text[at].isalnum() or text[at] in "_$."):
                raise fail(at + 1, f"unexpected {text[at]!r} after a number")
        elif (match := _NAME.match(text, at)) is not None:
            word = match.group()
            upper = word.upper()
            if upper in KEYWORDS:
                tokens.append(Token("keyword", upper, at + 1))
            else:
                tokens.append(Token("name", word, at + 1))
            at = match.end()
        elif text.startswith(("<>", "<=", ">="), at):
            tokens.append(Token("symbol", text[at : at + 2], at + 1))
            at += 2
        elif char in "=<>(),+-":
            tokens.append(Token("symbol", char, at + 1))
            at += 1
        else:
            raise fail(at + 1, f"unexpected character {char!r}")
        at = _skip_space(text, at)
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


def _string(text: str, start: int) -> tuple[str, int]:
    """The value of the string literal at `start` (quotes doubled inside) and where it ends."""
    parts = []
    at = start + 1
    while True:
        end = text.find("'", at)
        if end < 0:
            raise fail(start + 1, "the string that starts here is not closed with a quote")
        parts.append(text[at:end])
        if text.startswith("''", end):
            parts.append("'")
            at = end + 2
        else:
            return "".join(parts), end + 1


def _number_text(match: re.Match[str], position: int) -> str:
    mantissa, exponent = match.group("mantissa"), match.group("exponent") or ""
    if match.group("long") and ("." in mantissa or exponent):
        raise fail(position, "the suffix 'L' is for whole numbers only")
    digits = exponent[1:].lstrip("+-").lstrip("0")
    if len(digits) > len(str(MAX_EXPONENT)) or (digits and int(digits) > MAX_EXPONENT):
        raise fail(position, f"the number's exponent is beyond ±{MAX_EXPONENT}")
    return mantissa + exponent
