"""Check sources without a database: URLs taken apart and masked, the key and its file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from coordinator.core.checkback.sources import SecretBox, UnreadableSecret
from coordinator.domain.check_sources import check_source_url, masked
from coordinator.domain.errors import InvalidMessage


def test_the_password_is_split_off_and_masked() -> None:
    url = check_source_url("postgres://app:s%40cret@db.internal:6432/shop?sslmode=require")
    assert url.password == "s@cret"
    assert url.url == "postgresql://app@db.internal:6432/shop?sslmode=require"
    assert (url.host, url.port) == ("db.internal", 6432)
    assert masked(url.url, has_password=True) == (
        "postgresql://app:***@db.internal:6432/shop?sslmode=require"
    )
    assert masked(url.url, has_password=False) == url.url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app@[::ffff:169.254.169.254]/shop",  # an IPv6 spelling of metadata
        "postgresql://app@0xa9.0xfe.0xa9.0xfe/shop",  # read as 169.254.169.254
        "postgresql://app@100.100.100.200/shop",  # Alibaba Cloud's metadata
        "postgresql://app@h\x00/shop",
        "postgresql://app@db/shop?passfile=/root/.pgpass",
        "postgresql://app@db/shop?password=x",
        "postgresql://app@db/",
    ],
)
def test_refused_urls(url: str) -> None:
    with pytest.raises(InvalidMessage):
        check_source_url(url)


def test_loopback_and_private_addresses_are_allowed_as_for_check_urls() -> None:
    for host in ("127.0.0.1", "[::1]", "10.0.0.5", "localhost"):
        assert check_source_url(f"postgresql://app@{host}/shop").port == 5432


def test_the_key_file_is_made_once_with_mode_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "check-source.key"
    token = SecretBox(None, path).encrypt("hunter2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert SecretBox(None, path).decrypt(token) == "hunter2"  # another node, the same file
    assert b"hunter2" not in token.encode()
    assert list(path.parent.iterdir()) == [path]  # no draft left behind


def test_a_passphrase_or_a_fernet_key_and_another_key_cannot_read(tmp_path: Path) -> None:
    token = SecretBox("a passphrase", None).encrypt("hunter2")
    assert SecretBox("a passphrase", None).decrypt(token) == "hunter2"
    with pytest.raises(UnreadableSecret, match="register the source again"):
        SecretBox("another passphrase", tmp_path / "unused").decrypt(token)
    fernet_key = "x" * 43 + "="
    assert SecretBox(fernet_key, None).decrypt(SecretBox(fernet_key, None).encrypt("a")) == "a"
