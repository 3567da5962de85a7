"""Settings from defaults, a TOML file, the environment and flags, and where each came from.

Precedence: flags > environment (COORDINATOR_*) > config file (--config or
COORDINATOR_CONFIG) > defaults. pydantic-settings reads the file (tomllib)
and the environment; this module only layers them and remembers, for
`coordinator config show` and for error messages, which layer gave each value.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError
from pydantic_settings import EnvSettingsSource, TomlConfigSettingsSource

from coordinator.config import Settings, SettingsError, env_name

CONFIG_VARIABLE = "COORDINATOR_CONFIG"


class ConfigFileError(ValueError):
    """A config file that cannot be read, is not TOML, or names no setting."""


class Source(StrEnum):
    DEFAULT = "default"
    FILE = "file"
    ENVIRONMENT = "environment"
    FLAG = "flag"


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from: `where` is the file, the variable or the flag."""

    source: Source
    where: str | None = None

    def __str__(self) -> str:
        return self.source.value if self.where is None else f"{self.source.value} {self.where}"


DEFAULT = Origin(Source.DEFAULT)


@dataclass(frozen=True)
class LoadedSettings:
    settings: Settings
    origins: Mapping[str, Origin] = field(default_factory=dict)
    config_file: Path | None = None

    def origin(self, name: str) -> Origin:
        return self.origins.get(name, DEFAULT)

    def with_flags(self, flags: Mapping[str, Any], names: Mapping[str, str]) -> LoadedSettings:
        """These settings with a command's flags applied (None: not given); SettingsError."""
        given = {name: value for name, value in flags.items() if value is not None}
        settings = self.settings.with_overrides(**given)
        origins = {**self.origins, **{n: Origin(Source.FLAG, names.get(n, n)) for n in given}}
        return LoadedSettings(settings, origins, self.config_file)


def load_settings(
    config_flag: Path | None,
    flags: Mapping[str, Any],
    flag_names: Mapping[str, str],
) -> LoadedSettings:
    """Every setting from its highest layer, validated.

    A wrong value raises SettingsError naming where it was written (the file
    and key, the variable, the flag); a bad file raises ConfigFileError.
    """
    config_file = _config_file(config_flag)
    given = {name: value for name, value in flags.items() if value is not None}
    layers: list[tuple[Source, dict[str, Any], Callable[[str], str]]] = [
        (Source.FILE, _file_values(config_file) if config_file else {}, lambda _: str(config_file)),
        (Source.ENVIRONMENT, EnvSettingsSource(Settings)(), env_name),
        (Source.FLAG, given, lambda name: flag_names.get(name, name)),
    ]
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    for source, layer, where in layers:
        for name, value in layer.items():
            values[name] = value
            origins[name] = Origin(source, where(name))
    try:
        settings = Settings.model_validate(values)
    except ValidationError as error:
        names = {name: _called(name, origin) for name, origin in origins.items()}
        raise SettingsError.from_validation(error, names) from None
    return LoadedSettings(settings, origins, config_file)


def _called(name: str, origin: Origin) -> str:
    """A setting as the user wrote it: `--flag`, `VARIABLE`, `file: key`."""
    if origin.source is Source.FILE:
        return f"{origin.where}: {name}"
    return origin.where or name


def _config_file(flag: Path | None) -> Path | None:
    if flag is not None:
        given, called = flag, "--config"
    elif os.environ.get(CONFIG_VARIABLE):
        given, called = Path(os.environ[CONFIG_VARIABLE]), CONFIG_VARIABLE
    else:
        return None
    path = given.expanduser().resolve()
    if not path.is_file():
        reason = "is a directory" if path.is_dir() else "no such file"
        raise ConfigFileError(f"{called}={str(given)!r}: {reason} ({path})")
    return path


def _file_values(path: Path) -> dict[str, Any]:
    try:
        values = TomlConfigSettingsSource(Settings, toml_file=path)()
    except tomllib.TOMLDecodeError as error:
        raise ConfigFileError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise ConfigFileError(f"{path}: cannot read it: {error.strerror}") from None
    unknown = sorted(values.keys() - Settings.model_fields.keys())
    if unknown:
        raise ConfigFileError(f"{path}: {_unknown(unknown[0])}")
    # A relative path in the file means relative to the file, wherever the
    # command runs: the file and what it names travel together.
    return {
        name: path.parent / value
        if _is_path(name) and isinstance(value, str) and not Path(value).expanduser().is_absolute()
        else value
        for name, value in values.items()
    }


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, Settings.model_fields, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"{key!r} is not a setting{hint}; every setting is listed in docs/configuration.md "
        "and by `coordinator config show`"
    )


def _is_path(name: str) -> bool:
    annotation = Settings.model_fields[name].annotation
    return annotation is Path or Path in get_args(annotation)
