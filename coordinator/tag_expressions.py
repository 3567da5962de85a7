"""RocketMQ tag filter expressions: `*`, `TagA`, `TagA || TagB`.

A subscription stores the expression as given and the parsed tags (None for
`*`, which matches every message, with or without a tag). A message with no
tag matches only `*`, as in RocketMQ.
"""

from __future__ import annotations

from coordinator.errors import InvalidMessage
from coordinator.validation import check_tags

SUBSCRIBE_ALL = "*"
EXPRESSION_MAX_LENGTH = 4096


def parse_tag_expression(expression: str | None) -> tuple[str, ...] | None:
    """The tags an expression selects, or None when it selects every message."""
    if expression is None or expression.strip() in ("", SUBSCRIBE_ALL):
        return None
    if len(expression) > EXPRESSION_MAX_LENGTH:
        raise InvalidMessage(
            f"the tag expression is longer than {EXPRESSION_MAX_LENGTH} characters"
        )
    tags: list[str] = []
    for part in expression.split("||"):
        tag = part.strip()
        if not tag:
            raise InvalidMessage(
                f"tag expression {expression!r} has an empty tag; "
                "write '*' or tags separated by '||', e.g. 'TagA || TagB'"
            )
        if tag == SUBSCRIBE_ALL:
            raise InvalidMessage(
                f"tag expression {expression!r}: '*' selects every tag and cannot be combined"
            )
        try:
            check_tags(tag)
        except InvalidMessage as error:
            raise InvalidMessage(f"tag expression {expression!r}: {error.message}") from None
        if tag not in tags:
            tags.append(tag)
    return tuple(tags)
