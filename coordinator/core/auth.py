"""Authentication and per-token limits, the same for every door.

`Authenticator` keeps the live tokens in memory (by the SHA-256 of their
secret) and rereads them when one is created or revoked (NOTIFY
coordinator_tokens) and every token_refresh_seconds. A door hands it the
request's bearer token and gets a Principal, or Unauthenticated.

Authentication is off while no live token exists and the server is allowed
to run open (it listens on loopback, or was started `--insecure`): every
request is then the anonymous principal. A server that may not run open
refuses every request until a token exists, so revoking the last token never
opens a public port.

Limits per token: a token bucket of rate_limit_per_second and
rate_limit_burst (RateLimited, HTTP 429), and at most
max_long_polls_per_token long polls at once, one counter for every door
(an HTTP or gRPC long poll, and each open gRPC Telemetry stream, holds
one). With authentication off they do not apply (the server listens on
loopback, or was started --insecure).

What lasts beyond one request (a gRPC Telemetry stream) asks `current` for
its principal again after every reread (`on_refresh`), so a revoked token
loses its streams within token_refresh_seconds, at once when notified.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from coordinator.core.configs import AuthConfig, LimitsConfig
from coordinator.core.context import CoreContext
from coordinator.core.tokens import grants_of, secret_sha256
from coordinator.db.notifier import TOKENS_CHANNEL
from coordinator.db.queries import fetch_all
from coordinator.domain.access import Principal
from coordinator.domain.errors import RateLimited, Unauthenticated

log = logging.getLogger(__name__)

BEARER = "bearer "
_ANONYMOUS = Principal.anonymous()  # one, not one per request of an open server


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float
    long_polls: int = 0


@dataclass(slots=True)
class Limits:
    """Per-principal request rate and concurrent long polls."""

    config: LimitsConfig
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def _bucket(self, name: str, now: float) -> _Bucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = _Bucket(float(self.config.rate_limit_burst), now)
        return bucket

    def take_request(self, principal: Principal) -> None:
        rate = self.config.rate_limit_per_second
        # Without authentication there is no one to tell apart: one shared
        # budget would throttle every client together.
        if rate <= 0 or principal is _ANONYMOUS:
            return
        now = time.monotonic()
        bucket = self._bucket(principal.name, now)
        bucket.tokens = min(
            float(self.config.rate_limit_burst), bucket.tokens + (now - bucket.updated) * rate
        )
        bucket.updated = now
        if bucket.tokens < 1:
            raise RateLimited(
                f"token {principal.name!r} is over its rate of {rate:g} requests per second; "
                "slow down and retry"
            )
        bucket.tokens -= 1

    @contextlib.contextmanager
    def long_poll(self, principal: Principal) -> Iterator[None]:
        if principal is _ANONYMOUS:
            yield
            return
        bucket = self._bucket(principal.name, time.monotonic())
        most = self.config.max_long_polls_per_token
        if bucket.long_polls >= most:
            raise RateLimited(
                f"token {principal.name!r} holds {most} long polls already; wait for one to return"
            )
        bucket.long_polls += 1
        try:
            yield
        finally:
            bucket.long_polls -= 1


class Authenticator:
    def __init__(self, context: CoreContext, config: AuthConfig) -> None:
        self._context = context
        self._config = config
        self.open_allowed = config.open_allowed
        self._principals: dict[str, Principal] = {}
        self._by_name: dict[str, Principal] = {}
        self.limits = Limits(config.limits)
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[], None]] = []

    @property
    def enabled(self) -> bool:
        """Whether requests need a token (see the module's docstring)."""
        return bool(self._principals) or not self.open_allowed

    async def refresh(self) -> None:
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(conn, "active_tokens")
        self._principals = {
            row["secret_sha256"]: Principal(row["name"], grants_of(row)) for row in rows
        }
        self._by_name = {principal.name: principal for principal in self._principals.values()}
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # one listener's failure must not stop the rereads
                log.exception("a token listener failed")

    def on_refresh(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after every reread of the tokens; returns its removal."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def current(self, principal: Principal) -> Principal | None:
        """`principal` as the tokens now stand: None once its token is revoked (or, for
        the anonymous principal, once authentication is on).

        A token's name is never reused, revoked or not, so the name finds it.
        """
        if principal is _ANONYMOUS:
            return None if self.enabled else principal
        return self._by_name.get(principal.name)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization: Bearer <token>` header value."""
        token = None
        if self.enabled:
            if not authorization or not authorization[:7].lower() == BEARER:
                raise Unauthenticated(
                    "this coordinator needs a token: send 'Authorization: Bearer <token>'"
                )
            token = authorization[7:].strip()
        return self.authenticate_token(token)

    def authenticate_token(self, token: str | None, *, how_to_send: str = "") -> Principal:
        """The principal of a token however a door carries it, counted against its rate.

        `how_to_send` completes the sentence for a request without a token.
        """
        if not self.enabled:
            principal = _ANONYMOUS
        else:
            if token is None:
                raise Unauthenticated(f"this coordinator needs a token{how_to_send}")
            known = self._principals.get(secret_sha256(token))
            if known is None:
                raise Unauthenticated("the token is not valid (unknown or revoked)")
            principal = known
        self.limits.take_request(principal)
        return principal

    # --- lifetime ---------------------------------------------------------------
    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._follow(), name="coordinator-tokens")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        interval = self._config.token_refresh_seconds
        notifier = self._context.notifier
        async with contextlib.AsyncExitStack() as stack:
            wake_up = (
                await stack.enter_async_context(notifier.subscribe(TOKENS_CHANNEL))
                if notifier is not None
                else None
            )
            while True:
                if wake_up is None:
                    await asyncio.sleep(interval)
                else:
                    await wake_up.wait(interval)
                try:
                    await self.refresh()
                except Exception as error:  # the database may be away: keep the last tokens
                    log.warning("could not reread the tokens: %s", error)


@contextlib.asynccontextmanager
async def running_authenticator(
    context: CoreContext, config: AuthConfig
) -> AsyncIterator[Authenticator]:
    authenticator = Authenticator(context, config)
    await authenticator.start()
    try:
        yield authenticator
    finally:
        await authenticator.stop()
