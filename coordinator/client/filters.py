"""How a consumer's subscription selects messages: a tag expression, or `Sql92`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sql92:
    """A SQL92 filter over the message's properties and its tag (`TAGS`).

    `{"orders": Sql92("amount > 100 AND region IN ('eu', 'uk')")}` where a
    consumer takes `{topic: expression}`; a plain string there is a tag
    expression ('*', 'TagA || TagB'). The coordinator parses the expression:
    a bad one is refused (InvalidRequest, code invalid_filter_expression,
    its message saying at which position).
    """

    expression: str


Filter = str | Sql92  # a subscription's filter: a tag expression or a SQL92 one
