"""The `main` of every soak child process: its config as one JSON argument, warnings logged."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


C = TypeVar("C", bound=Named)


def child_main(
    config_type: Callable[..., C], run: Callable[[C], Any], argv: list[str] | None
) -> None:
    args = sys.argv[1:] if argv is None else argv
    config = config_type(**json.loads(args[0]))
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s {config.name} %(levelname)s %(message)s",
    )
    run(config)
