"""Tokens in Postgres (hashed) and the authenticator that follows their changes."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator, running_authenticator
from coordinator.domain.access import ANONYMOUS, Grants
from coordinator.domain.errors import NotFound, StateConflict, Unauthenticated
from tests.checkback_helpers import eventually

pytestmark = pytest.mark.anyio

PRODUCE = Grants(produce_topics=("orders",), producer_groups=("order-*",))


async def test_only_the_hash_of_a_token_is_stored(
    core: Coordinator, db: psycopg.Connection
) -> None:
    created = await core.tokens.create("order-svc", PRODUCE)
    assert created.token.startswith("coord_") and len(created.token) > 40
    (stored,) = db.execute("SELECT secret_sha256 FROM api_tokens").fetchone()
    assert stored == hashlib.sha256(created.token.encode()).hexdigest()
    dumped = db.execute("SELECT api_tokens::text FROM api_tokens").fetchone()[0]
    assert created.token not in dumped


async def test_names_are_unique_and_revoked_tokens_stay_listed(core: Coordinator) -> None:
    await core.tokens.create("order-svc", PRODUCE)
    with pytest.raises(StateConflict, match="exists already"):
        await core.tokens.create("order-svc", Grants(admin=True))
    revoked = await core.tokens.revoke("order-svc")
    assert revoked.revoked_at is not None
    with pytest.raises(NotFound, match="no live token"):
        await core.tokens.revoke("order-svc")
    (listed,) = await core.tokens.list()
    assert listed.name == "order-svc" and listed.revoked_at is not None
    assert listed.grants == PRODUCE


async def test_authentication_follows_tokens_as_they_are_made_and_revoked(
    database_url: str,
) -> None:
    async with (
        Coordinator.connect(database_url, Settings(), listen=True) as core,
        running_authenticator(core.context, replace(core.configs.auth, open_allowed=True)) as auth,
    ):
        assert not auth.enabled and auth.authenticate(None).name == ANONYMOUS
        created = await core.tokens.create("order-svc", PRODUCE)
        header = f"Bearer {created.token}"

        async def who() -> str:
            try:
                return auth.authenticate(header).name
            except Unauthenticated:
                return "-"

        # NOTIFY wakes the authenticator; the bound is generous, never a speed check
        assert await eventually(who, lambda name: name == "order-svc") == "order-svc"
        assert auth.authenticate(f"bearer  {created.token} ").grants == PRODUCE
        with pytest.raises(Unauthenticated, match="needs a token"):
            auth.authenticate(None)
        with pytest.raises(Unauthenticated, match="not valid"):
            auth.authenticate("Bearer coord_guessed")
        await core.tokens.create("ops", Grants(admin=True))  # keeps authentication on
        await core.tokens.revoke("order-svc")
        assert await eventually(who, lambda name: name == "-") == "-"
        await core.tokens.revoke("ops")
        # the last token gone: open again, as this server may run open
        assert await eventually(who, lambda name: name == ANONYMOUS) == ANONYMOUS


async def test_a_server_that_may_not_run_open_refuses_everyone_without_tokens(
    core: Coordinator,
) -> None:
    auth = Authenticator(core.context, replace(core.configs.auth, open_allowed=False))
    await auth.refresh()
    assert auth.enabled
    with pytest.raises(Unauthenticated):
        auth.authenticate(None)
