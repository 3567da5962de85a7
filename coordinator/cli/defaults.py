"""A setting's default as the help of its flag states it, read from `Settings`.

Help texts say `[default: ...]` themselves (typer's own default of these
options is None: "not given", so the file and the environment still count),
and a default written out in a help text would drift from the setting's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.config import Settings


def setting_default(name: str, shown: Mapping[Any, str] | None = None) -> str:
    """`default: X`, X the setting's default as its flag is given (6.0 is `6`).

    `shown` words a default that is no value to type: `{None: "off"}`.
    """
    default = Settings.model_fields[name].default
    if shown is not None and default in shown:
        return f"default: {shown[default]}"
    if isinstance(default, float):
        return f"default: {default:g}"
    return f"default: {default}"
