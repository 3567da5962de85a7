"""API tokens: created, listed and revoked (the CLI), and stored only as hashes.

A token is `coord_` followed by 43 random URL-safe characters (256 bits).
The database keeps its SHA-256, never the token: a token is shown once, when
it is created. High-entropy secrets need no slow hash; SHA-256 lets a
serving process find a token with one dictionary lookup (see auth.py).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coordinator.core.context import CoreContext
from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.access import Grants, check_patterns
from coordinator.domain.errors import InvalidMessage, NotFound, StateConflict
from coordinator.domain.rules import check_name

TOKEN_PREFIX = "coord_"


def secret_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def grants_of(row: dict[str, Any]) -> Grants:
    return Grants(
        produce_topics=tuple(row["produce_topics"]),
        producer_groups=tuple(row["producer_groups"]),
        consume_groups=tuple(row["consume_groups"]),
        consume_topics=tuple(row["consume_topics"]),
        admin=row["admin"],
        metrics=row["metrics"],
    )


@dataclass(frozen=True, slots=True)
class TokenInfo:
    name: str
    grants: Grants
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class CreatedToken:
    info: TokenInfo
    token: str  # the secret: shown once, never stored


def _info(row: dict[str, Any]) -> TokenInfo:
    return TokenInfo(row["name"], grants_of(row), row["created_at"], row["revoked_at"])


def check_grants(grants: Grants) -> Grants:
    produce = (grants.produce_topics, grants.producer_groups)
    consume = (grants.consume_groups, grants.consume_topics)
    if any(produce) and not all(produce):
        raise InvalidMessage("produce needs both topics and producer groups")
    if any(consume) and not all(consume):
        raise InvalidMessage("consume needs both consumer groups and topics")
    if not (any(produce) or any(consume) or grants.admin or grants.metrics):
        raise InvalidMessage("a token needs at least one permission")
    return Grants(
        produce_topics=check_patterns("topic", grants.produce_topics),
        producer_groups=check_patterns("producer group", grants.producer_groups),
        consume_groups=check_patterns("consumer group", grants.consume_groups),
        consume_topics=check_patterns("topic", grants.consume_topics),
        admin=grants.admin,
        metrics=grants.metrics,
    )


class Tokens:
    def __init__(self, context: CoreContext) -> None:
        self._context = context

    async def create(self, name: str, grants: Grants) -> CreatedToken:
        check_name("token name", name)
        grants = check_grants(grants)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn,
                "create_token",
                {"name": name, "secret_sha256": secret_sha256(token), **grants.by_field()},
            )
        if row is None:
            raise StateConflict(f"a token named {name!r} exists already (names stay taken)")
        return CreatedToken(_info(row), token)

    async def list(self) -> list[TokenInfo]:
        async with self._context.pool.connection() as conn:
            return [_info(row) for row in await fetch_all(conn, "list_tokens")]

    async def revoke(self, name: str) -> TokenInfo:
        async with self._context.pool.connection() as conn:
            row = await fetch_one(conn, "revoke_token", {"name": name})
        if row is None:
            raise NotFound(f"no live token named {name!r}")
        return _info(row)
