"""Settings from a config file, the environment and flags; URLs; options after the command."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import SecretStr

from coordinator.cli import app as cli_app
from coordinator.cli.global_options import hoisted
from coordinator.cli.sources import (
    ConfigFileError,
    Origin,
    Source,
    load_settings,
)
from coordinator.config import Settings, SettingsError
from coordinator.db.urls import libpq_url, psql_arguments, redact

DOCS = Path(__file__).resolve().parents[2] / "docs"
FLAGS = {"database_url": "--database-url", "data_dir": "--data-dir", "port": "--port"}


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No COORDINATOR_* variable but those a test sets."""
    for name in os.environ:
        if name.startswith("COORDINATOR_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_flags_win_over_the_environment_over_the_file_over_defaults(
    tmp_path: Path, environment: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "coordinator.toml"
    config.write_text("port = 9000\ncheck_max = 3\nretention_hours = 1.5\n")
    environment.setenv("COORDINATOR_PORT", "9100")
    environment.setenv("COORDINATOR_CHECK_MAX", "4")

    loaded = load_settings(config, {"port": 9200}, FLAGS)

    settings = loaded.settings
    assert (settings.port, settings.check_max, settings.retention_hours) == (9200, 4, 1.5)
    assert settings.transaction_timeout_seconds == 6.0
    assert loaded.origin("port") == Origin(Source.FLAG, "--port")
    assert loaded.origin("check_max") == Origin(Source.ENVIRONMENT, "COORDINATOR_CHECK_MAX")
    assert loaded.origin("retention_hours") == Origin(Source.FILE, str(config))
    assert loaded.origin("transaction_timeout_seconds") == Origin(Source.DEFAULT)
    assert loaded.config_file == config


def test_the_config_file_may_come_from_the_environment(
    tmp_path: Path, environment: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.toml"
    config.write_text("check_max = 7\n")
    environment.setenv("COORDINATOR_CONFIG", str(config))
    assert load_settings(None, {}, FLAGS).settings.check_max == 7
    # --config wins over the variable
    other = tmp_path / "other.toml"
    other.write_text("check_max = 8\n")
    assert load_settings(other, {}, FLAGS).settings.check_max == 8


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("chek_max = 3\n", "c.toml: 'chek_max' is not a setting (did you mean check_max?)"),
        ("check_max = 0\n", "c.toml: check_max=0: input should be greater than or equal to 1"),
        ("port = 'http'\n", "c.toml: port='http': input should be a valid integer"),
        ("check_max = \n", "c.toml: not valid TOML: Invalid value (at line 1, column 13)"),
        ("[server]\nport = 1\n", "c.toml: 'server' is not a setting"),
    ],
)
def test_a_wrong_file_is_a_sentence_naming_the_file_and_key(
    tmp_path: Path, environment: pytest.MonkeyPatch, text: str, sentence: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises((ConfigFileError, SettingsError)) as refused:
        load_settings(config, {}, FLAGS)
    assert f"{tmp_path}/{sentence}" in str(refused.value)


def test_a_missing_config_file_is_named_as_given(
    tmp_path: Path, environment: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigFileError, match=r"--config='nowhere.toml': no such file"):
        load_settings(Path("nowhere.toml"), {}, FLAGS)
    environment.setenv("COORDINATOR_CONFIG", str(tmp_path))
    with pytest.raises(ConfigFileError, match=r"COORDINATOR_CONFIG=.*: is a directory"):
        load_settings(None, {}, FLAGS)


def test_paths_in_the_file_are_relative_to_the_file(
    tmp_path: Path, environment: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "etc" / "coordinator.toml"
    config.parent.mkdir()
    config.write_text('data_dir = "data"\ntls_cert_file = "/abs/cert.pem"\n')
    environment.chdir(tmp_path.parent)
    settings = load_settings(config, {}, FLAGS).settings
    assert settings.data_dir == tmp_path / "etc" / "data"
    assert settings.tls_cert_file == Path("/abs/cert.pem")


def test_the_example_file_in_the_docs_loads(
    tmp_path: Path, environment: pytest.MonkeyPatch
) -> None:
    page = (DOCS / "configuration.md").read_text()
    (example,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    config = tmp_path / "coordinator.toml"
    config.write_text(example)
    loaded = load_settings(config, {}, FLAGS)
    keys = set(re.findall(r"^([a-z_]+)\s*=", example, re.M))
    assert len(keys) >= 5
    assert {name for name in keys if loaded.origin(name).source is Source.FILE} == keys


def test_the_data_directory_is_absolute(environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    environment.chdir(tmp_path)
    assert Settings().data_dir == tmp_path / ".coordinator"
    assert Settings(data_dir=Path("x/../y")).data_dir == tmp_path / "y"


@pytest.mark.parametrize("setting", ["database_url", "read_database_url"])
def test_a_database_url_must_be_a_postgresql_url_and_its_password_stays_hidden(
    setting: str,
) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environment(**{setting: "mysql://u:secret@h/db"})
    assert "not a PostgreSQL URL" in str(refused.value)
    assert "secret" not in str(refused.value)
    assert getattr(Settings(**{setting: ""}), setting) is None
    several = "postgresql://u:secret@h1:5432,h2:5432/db?target_session_attrs=prefer-standby"
    assert getattr(Settings(**{setting: several}), setting) == several


def test_secrets_stay_hidden_in_errors(environment: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings().with_overrides(check_push_secret=SecretStr("hush"), check_max=0)
    assert "hush" not in str(refused.value)


def test_only_a_password_that_exists_is_redacted() -> None:
    assert redact("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    assert redact("postgresql://postgres:@/coordinator?host=/tmp/x") == (
        "postgresql://postgres@/coordinator?host=/tmp/x"
    )
    assert redact("postgresql://u@h:5432/db") == "postgresql://u@h:5432/db"
    assert libpq_url("postgresql://postgres:@/db?host=/s") == "postgresql://postgres@/db?host=/s"
    assert libpq_url("postgresql+psycopg://u:p@h/db") == "postgresql://u:p@h/db"


def test_psql_gets_the_password_in_its_environment_not_its_arguments() -> None:
    arguments, environment = psql_arguments("postgresql://u:s%40cret@/db?host=/run/pg&port=5433")
    assert arguments[0] == "--dbname"
    assert "s@cret" not in " ".join(arguments) and environment == {"PGPASSWORD": "s@cret"}
    assert {"user=u", "dbname=db", "host=/run/pg", "port=5433"} <= set(arguments[1].split())


HOISTED = [
    ("serve --data-dir X", "--data-dir X serve"),
    ("-v serve --port 1 --database-url=U", "-v --database-url=U serve --port 1"),
    ("--config c tx show 1 --config d", "--config c --config d tx show 1"),
    ("psql -- --data-dir X", "psql -- --data-dir X"),
    ("--data-dir X status", "--data-dir X status"),
    ("status --read-database-url R", "--read-database-url R status"),
    ("pipeline report --read-database-url=R -o x", "--read-database-url=R pipeline report -o x"),
    ("--help", "--help"),
]


@pytest.mark.parametrize(("given", "parsed"), HOISTED)
def test_the_global_options_after_the_command_move_before_it(given: str, parsed: str) -> None:
    assert hoisted(given.split()) == parsed.split()


def _setting_options(command: Any, path: str = "coordinator") -> Iterator[tuple[str, Any]]:
    """(command path, option) of every option named after a setting, in every command."""
    for param in command.params:
        if param.param_type_name == "option" and param.name in Settings.model_fields:
            yield path, param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _setting_options(sub, f"{path} {name}")


def _stated_default(option: Any, text: str) -> Any:
    """What a help text's `default: TEXT` means as a value of the option's setting."""
    if option.is_flag and option.secondary_opts:
        # `--reject-x/--accept-x [default: accept]`: the flag the default is.
        on = any(flag.startswith(f"--{text}") for flag in option.opts)
        off = any(flag.startswith(f"--{text}") for flag in option.secondary_opts)
        assert on != off, f"{text!r} names neither flag of {option.opts}"
        return on
    if text in ("off", "unset"):
        return None
    default = Settings.model_fields[option.name].default
    return type(default)(text)


def test_the_help_states_the_settings_own_defaults() -> None:
    # Help texts say `[default: ...]` themselves (the options' own default is
    # None: not given); each stated default must be the setting's.
    stated = {}
    for path, option in _setting_options(typer.main.get_command(cli_app)):
        match = re.search(r"[\[;] ?default: ([^\]]+)\]", option.help or "")
        if match:
            stated[f"{path} {option.opts[0]}"] = (
                _stated_default(option, match.group(1)),
                Settings.model_fields[option.name].default,
            )
    assert len(stated) >= 10  # serve's, and --data-dir
    assert {flag: pair for flag, pair in stated.items() if pair[0] != pair[1]} == {}
