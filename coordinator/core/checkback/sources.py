"""Check sources: register, list and remove a producer group's database; its secret.

The password of a check source's URL is never stored in clear: the URL is
kept without it and the password encrypted with Fernet (AES-128-CBC and
HMAC-SHA256) under the coordinator's key, which lives outside the database:
`check_source_key` (a Fernet key, or any passphrase, hashed into one), or
else a key file (`check_source_key_file`, by default beside the embedded
data) that the first node creates with mode 0600. A dump or a reader of the
coordinator's tables so learns nothing it can connect with. No command or
endpoint shows the password: listings carry the URL with `***` in its place.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from psycopg import AsyncConnection

from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext
from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.check_sources import (
    DEFAULT_BARRIER_TABLE,
    CheckSource,
    CheckSourceMode,
    check_barrier_table,
    check_mode,
    check_source_url,
    masked,
)
from coordinator.domain.errors import CoordinatorError, NotFound
from coordinator.domain.rules import check_name


class UnreadableSecret(CoordinatorError):
    """A stored password this coordinator's key does not decrypt."""


class SecretBox:
    """Encrypts and decrypts check sources' passwords with the coordinator's key."""

    def __init__(self, key: str | None, key_file: Path | None) -> None:
        self._key = key
        self._key_file = key_file
        self._fernet: Fernet | None = None

    def encrypt(self, secret: str) -> str:
        return self._box().encrypt(secret.encode()).decode("ascii")

    def decrypt(self, token: str) -> str:
        try:
            return self._box().decrypt(token.encode("ascii")).decode()
        except (InvalidToken, ValueError):
            raise UnreadableSecret(
                "the check source's password does not decrypt with this coordinator's key "
                "(check_source_key differs between nodes, or the key file was replaced): "
                "register the source again"
            ) from None

    def _box(self) -> Fernet:
        if self._fernet is None:
            self._fernet = Fernet(self._read_key())
        return self._fernet

    def _read_key(self) -> bytes:
        if self._key:
            return _fernet_key(self._key)
        if self._key_file is None:
            raise CoordinatorError("no check_source_key nor check_source_key_file is set")
        return _key_file(self._key_file)


# Fixed, so that every node derives the same key from the same passphrase.
PASSPHRASE_SALT = b"coordinator check-source key"


def _fernet_key(key: str) -> bytes:
    """A Fernet key as given, else one derived from the passphrase."""
    try:
        if len(base64.urlsafe_b64decode(key.encode())) == 32:
            return key.encode()
    except (binascii.Error, ValueError):
        pass
    # scrypt, not a plain hash: whoever copies the table must not be able to
    # try passphrases fast. Once per process (the Fernet is kept), ~16 MiB.
    derived = hashlib.scrypt(key.encode(), salt=PASSPHRASE_SALT, n=2**14, r=8, p=1, dklen=32)
    return base64.urlsafe_b64encode(derived)


def _key_file(path: Path) -> bytes:
    """The key in `path`; created (0600, never overwritten) when missing.

    Written to a file of its own, then linked into place: a node (or worker)
    starting at the same moment finds no file or the whole key, never half
    of one, and the first link wins.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(Fernet.generate_key())
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        finally:
            draft.unlink()
    key = path.read_bytes().strip()
    try:
        Fernet(key)
    except ValueError:
        raise CoordinatorError(
            f"the check source key file {path} does not hold a Fernet key"
        ) from None
    return key


def source_of(row: dict[str, Any]) -> CheckSource:
    return CheckSource(
        producer_group=row["producer_group"],
        url=masked(row["database_url"], row["has_password"]),
        barrier_table=row["barrier_table"],
        mode=check_mode(row["mode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_check_at=row["last_check_at"],
        last_ok=row["last_ok"],
        last_error=row["last_error"],
        consecutive_failures=row["consecutive_failures"],
    )


async def register(
    conn: AsyncConnection[Any],
    box: SecretBox,
    producer_group: str,
    database_url: str,
    barrier_table: str,
    mode: str,
) -> CheckSource:
    """Check every part first (400 with a sentence), then store: the password encrypted."""
    check_name("producer group", producer_group)
    url = check_source_url(database_url)
    table = check_barrier_table(barrier_table)
    chosen = check_mode(mode)
    row = await fetch_one(
        conn,
        "put_check_source",
        {
            "producer_group": producer_group,
            "database_url": url.url,
            "password_encrypted": box.encrypt(url.password) if url.password else None,
            "barrier_table": table,
            "mode": chosen.value,
        },
    )
    assert row is not None
    return source_of(row)


async def listed(conn: AsyncConnection[Any], producer_group: str | None) -> list[CheckSource]:
    rows = await fetch_all(conn, "list_check_sources", {"producer_group": producer_group})
    return [source_of(row) for row in rows]


async def remove(conn: AsyncConnection[Any], producer_group: str) -> bool:
    return bool(await fetch_all(conn, "delete_check_source", {"producer_group": producer_group}))


def secret_box(config: CheckBackConfig) -> SecretBox:
    return SecretBox(config.check_source_key, config.check_source_key_file)


class CheckSources:
    """The check sources service: what the doors and the CLI call."""

    def __init__(self, context: CoreContext, config: CheckBackConfig) -> None:
        self._context = context
        self._box = secret_box(config)

    async def set(
        self,
        producer_group: str,
        database_url: str,
        *,
        barrier_table: str = DEFAULT_BARRIER_TABLE,
        mode: str = CheckSourceMode.FALLBACK.value,
    ) -> CheckSource:
        """Register (or replace) the group's check source; its checks start at the next round."""
        async with self._context.pool.connection() as conn:
            return await register(
                conn, self._box, producer_group, database_url, barrier_table, mode
            )

    async def list(self, producer_group: str | None = None) -> list[CheckSource]:
        async with self._context.pool.connection() as conn:
            return await listed(conn, producer_group)

    async def get(self, producer_group: str) -> CheckSource:
        check_name("producer group", producer_group)
        found = await self.list(producer_group)
        if not found:
            raise NotFound(f"producer group {producer_group!r} has no check source")
        return found[0]

    async def remove(self, producer_group: str) -> bool:
        """Remove the group's check source; False when it had none."""
        check_name("producer group", producer_group)
        async with self._context.pool.connection() as conn:
            return await remove(conn, producer_group)
