"""Database check-backs: the coordinator asks a producer group's own database.

A claimed check request `via = 'database'` runs here, as a task of the
dispatcher like a push (bounded per check source as pushes are per check
URL): the group's check source is read, its password decrypted, its host
resolved and every address held to the check URLs' rules, and the barrier's
rule run on those addresses (`db.producer_barrier`, pinned to them). The
whole check is bounded by `check_push_timeout_seconds`: a dead or hanging
database holds only its own slots. The answer ends the half message as a
pushed answer would (from_check); a failure leaves the message to its next,
backed-off, check, with the reason on its check request and on the source.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import psycopg
from psycopg import AsyncConnection, errors

from coordinator.core.checkback.sources import SecretBox
from coordinator.db.producer_barrier import check_barrier
from coordinator.db.queries import execute, fetch_one
from coordinator.domain.check_sources import BarrierAnswer, check_source_url
from coordinator.domain.check_urls import forbidden_address
from coordinator.domain.errors import CoordinatorError

# The dispatcher's slots are keyed by URL; a check source's by its group.
SLOT_PREFIX = "database:"


def slot_key(producer_group: str) -> str:
    return SLOT_PREFIX + producer_group


async def source(conn: AsyncConnection[Any], producer_group: str) -> dict[str, Any] | None:
    """The group's check source as a check connects with it (password encrypted)."""
    return await fetch_one(conn, "check_source_for_check", {"producer_group": producer_group})


async def ask(
    box: SecretBox,
    source: dict[str, Any] | None,
    transaction_id: str,
    timeout_seconds: float,
) -> BarrierAnswer:
    """The barrier's outcome for `transaction_id`, or why the database could not tell.

    Holds no connection of the coordinator's pool while it waits for the
    producer's database.
    """
    if source is None:
        return BarrierAnswer(None, "the group's check source was removed before the check")
    try:
        url = check_source_url(source["database_url"])
        secret = source["password_encrypted"]
        password = box.decrypt(secret) if secret else None
    except CoordinatorError as error:
        return BarrierAnswer(None, error.message)
    table = source["barrier_table"]
    try:
        # One bound for all of it: resolving the name, connecting, the statements.
        async with asyncio.timeout(timeout_seconds + 1.0):
            try:
                addresses = await _checked_addresses(url.host, url.port)
            except CoordinatorError as error:
                return BarrierAnswer(None, error.message)
            except OSError as error:
                return BarrierAnswer(None, f"the host {url.host!r} does not resolve: {error}")
            outcome = await check_barrier(
                url.url,
                password=password,
                host=url.host,
                addresses=addresses,
                table=table,
                transaction_id=transaction_id,
                timeout_seconds=timeout_seconds,
            )
    except TimeoutError:
        return BarrierAnswer(
            None, f"the producer's database did not answer within {timeout_seconds:g} s"
        )
    except (errors.LockNotAvailable, errors.QueryCanceled):
        return BarrierAnswer(
            None,
            f"a local transaction still held the barrier key after {timeout_seconds:g} s",
        )
    except errors.UndefinedTable:
        return BarrierAnswer(None, f"the barrier table {table} does not exist")
    except errors.InsufficientPrivilege as error:
        return BarrierAnswer(None, f"the check source's role may not use {table}: {_first(error)}")
    except psycopg.Error as error:
        return BarrierAnswer(None, f"the producer's database failed: {_first(error)}")
    committed = outcome == "committed"
    said = "committed" if committed else "rolled back"
    return BarrierAnswer(committed, f"the barrier in the producer's database says {said}")


async def record(conn: AsyncConnection[Any], producer_group: str, answer: BarrierAnswer) -> None:
    await execute(
        conn,
        "record_check_source_check",
        {
            "producer_group": producer_group,
            "ok": answer.committed is not None,
            "error": answer.detail,
        },
    )


# The most addresses of one name a check tries (each within the connect timeout).
MAX_ADDRESSES = 4


async def _checked_addresses(host: str, port: int) -> list[str]:
    """The addresses to connect to, in the resolver's order: refused if any is forbidden."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise CoordinatorError(f"the host {host!r} resolves to no address")
    for address in addresses:
        reason = forbidden_address(address)
        if reason is not None:
            raise CoordinatorError(
                f"the host {host!r} resolves to {address}, which is {reason}; "
                "the coordinator does not connect to it"
            )
    return addresses[:MAX_ADDRESSES]


def _first(error: Exception) -> str:
    """An error's first line, bounded: a sentence for the check request and the source."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]
