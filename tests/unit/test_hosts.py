"""Host names: what a Host header names, which are loopback, and allowed_hosts as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.cli.sources import load_settings
from coordinator.config import Settings, SettingsError
from coordinator.domain.hosts import host_name, is_loopback


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("LocalHost.", "localhost"),
        ("[::1]:8080", "[::1]"),
        ("[0:0::1]", "[::1]"),
        ("coord.example.com", "coord.example.com"),
        ("coord.example.com:http", None),
        ("[::1", None),
        ("a..b", None),
        ("", None),
        ("evil.example/path", None),
    ],
)
def test_a_host_header_names_one_host_or_none(header: str, name: str | None) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    ("name", "loopback"),
    [
        ("localhost", True),
        ("api.localhost", True),
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("[::1]", True),
        ("[::ffff:7f00:1]", True),  # ::ffff:127.0.0.1
        # Listen addresses, as settings and flags write them.
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("LocalHost", True),
        ("localhost.example.com", False),
        ("128.0.0.1", False),
        ("127.example.com", False),
        ("[::2]", False),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("10.0.0.8", False),
        ("::ffff:10.0.0.8", False),
        ("example.org", False),
    ],
)
def test_only_names_that_mean_this_machine_are_loopback(name: str, loopback: bool) -> None:
    # One rule for the Host headers the HTTP door answers without authentication
    # and for the listen addresses `coordinator serve` may serve without tokens on.
    assert is_loopback(name) is loopback


def test_allowed_hosts_from_the_environment_and_a_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COORDINATOR_ALLOWED_HOSTS", "Coord.Example.com, *.internal,,2001:db8::1")
    assert Settings().allowed_hosts == ("coord.example.com", "*.internal", "[2001:db8::1]")
    monkeypatch.delenv("COORDINATOR_ALLOWED_HOSTS")
    config = tmp_path / "coordinator.toml"
    config.write_text('allowed_hosts = ["coord.example.com", "*"]\n')
    assert load_settings(config, {}, {}).settings.allowed_hosts == ("coord.example.com", "*")
    assert Settings().allowed_hosts == ()


@pytest.mark.parametrize("entry", ["http://coord.example.com", "coord.example.com:8080", "a b"])
def test_an_allowed_host_with_a_scheme_port_or_space_is_refused(entry: str) -> None:
    with pytest.raises(SettingsError, match=r"COORDINATOR_ALLOWED_HOSTS=.*is not a host name"):
        Settings.from_environment(allowed_hosts=entry)
