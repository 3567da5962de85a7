"""The options of `coordinator` itself, taken before the command or anywhere after it.

`coordinator --data-dir X serve` and `coordinator serve --data-dir X` mean
the same: the documentation lists these as flags of `serve` too, and users
add a flag at the end of the line they just ran. Click knows an option only
at its own level, so the root group moves them in front of the command
before it parses.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

# The options of `coordinator` that take a value and may follow the command.
HOISTED = ("--database-url", "--read-database-url", "--data-dir", "--config")


class CoordinatorGroup(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoisted(args))


def hoisted(args: list[str]) -> list[str]:
    """`args` with HOISTED options after the command moved before it.

    Everything after `--` stays where it is (`coordinator psql -- ...` hands
    it on untouched), and so do options of other names.
    """
    command = _command_index(args)
    if command is None:
        return args
    moved: list[str] = []
    rest: list[str] = []
    tail = args[command + 1 :]
    i = 0
    while i < len(tail):
        arg = tail[i]
        if arg == "--":
            rest += tail[i:]
            break
        if arg in HOISTED and i + 1 < len(tail):
            moved += tail[i : i + 2]
            i += 2
            continue
        if arg.startswith(tuple(f"{option}=" for option in HOISTED)):
            moved.append(arg)
        else:
            rest.append(arg)
        i += 1
    return [*args[:command], *moved, args[command], *rest]


def _command_index(args: list[str]) -> int | None:
    """Where the command's name is: the first word that is no option nor an option's value."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return None
        if arg in HOISTED:
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            return i
    return None
