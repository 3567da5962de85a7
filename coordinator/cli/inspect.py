"""`coordinator tx show ID`: one message and its history (`coordinator status` is status.py)."""

from __future__ import annotations

from datetime import timedelta

import typer
from rich.table import Table
from rich.text import Text

from coordinator.cli.common import JSON_OPTION, console, open_core, print_json, run_async
from coordinator.cli.tables import Column, print_table
from coordinator.core import Coordinator
from coordinator.domain.errors import AmbiguousMessageId, NotFound
from coordinator.domain.messages import MessageRecord
from coordinator.views.messages import MessageOut

# A message id is unique within its producer group (without one: its topic),
# so an id several groups use needs one of these to say which message.
PRODUCER_GROUP_OPTION = typer.Option(
    None,
    "--producer-group",
    help="ID is a message id of this producer group (for an id several groups use).",
)
TOPIC_OPTION = typer.Option(
    None,
    "--topic",
    help="ID is a message id in this topic (for an id of messages sent without a group).",
)


tx_app = typer.Typer(help="Inspect one transaction or message.", no_args_is_help=True)


def _age(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


@tx_app.command("show")
@run_async
async def show(
    ctx: typer.Context,
    ident: str = typer.Argument(..., metavar="ID", help="Offset, transaction id or message id."),
    producer_group: str | None = PRODUCER_GROUP_OPTION,
    topic: str | None = TOPIC_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One message with its history of state changes."""
    async with open_core(ctx) as core:
        record = await _find(core, ident, producer_group=producer_group, topic=topic)
    if as_json:
        # The answer of GET /v1/transactions/{id}: the whole body, as base64 and text.
        print_json(MessageOut.of(record).model_dump(mode="json"))
        return
    _print_record(record)


async def _find(
    core: Coordinator, ident: str, *, producer_group: str | None = None, topic: str | None = None
) -> MessageRecord:
    if producer_group is not None or topic is not None:
        return await _by_message_id(core, ident, producer_group, topic)
    if ident.isdigit():
        return await core.inspection.get_message(offset=int(ident))
    try:
        return await core.inspection.get_message(transaction_id=ident)
    except NotFound:
        pass
    try:
        return await _by_message_id(core, ident, None, None)
    except NotFound:
        raise NotFound(f"no message with offset, transaction id or message id {ident!r}") from None


async def _by_message_id(
    core: Coordinator, message_id: str, producer_group: str | None, topic: str | None
) -> MessageRecord:
    try:
        return await core.inspection.get_message(
            message_id=message_id, producer_group=producer_group, topic=topic
        )
    except AmbiguousMessageId as error:
        raise AmbiguousMessageId(
            error.message.replace(
                "give the producer group (or, for a message sent without one, the topic)",
                "give --producer-group (or, for a message sent without one, --topic)",
            )
        ) from None


def _print_record(record: MessageRecord) -> None:
    fields = Table(show_header=False, title=f"Message {record.message_id}")
    fields.add_column("field", style="bold", no_wrap=True)
    # Ids fit on a line of any terminal wider than about 50 cells; a long
    # body or property list wraps instead of being cut.
    fields.add_column("value", overflow="fold")
    try:
        body = record.body.decode()
        body = body if len(body) <= 200 else body[:200] + "..."
    except UnicodeDecodeError:
        body = f"<{len(record.body)} bytes, not UTF-8>"
    rows = [
        ("offset", str(record.offset)),
        ("transaction id", record.transaction_id or "-"),
        ("kind", record.kind.value),
        ("state", record.state.value),
        ("producer group", record.producer_group or "-"),
        ("topic", record.topic),
        ("tags", record.tags or "-"),
        ("keys", " ".join(record.keys) or "-"),
        ("properties", ", ".join(f"{k}={v}" for k, v in record.properties.items()) or "-"),
        ("body", body),
        ("check count", str(record.check_count)),
        ("born", record.born_at.isoformat(timespec="seconds")),
        (
            "next check",
            record.next_check_at.isoformat(timespec="seconds") if record.next_check_at else "-",
        ),
        (
            "resolved",
            record.resolved_at.isoformat(timespec="seconds") if record.resolved_at else "-",
        ),
        ("resolved by", record.resolution_source.value if record.resolution_source else "-"),
    ]
    for name, value in rows:
        fields.add_row(name, Text(value))
    console.print(fields)
    print_table(
        console,
        "History",
        [Column("at"), Column("source"), Column("from"), Column("to"), Column("detail")],
        [
            [
                entry.at.isoformat(timespec="milliseconds"),
                entry.source.value,
                entry.from_state.value if entry.from_state else "-",
                entry.to_state.value,
                entry.detail or "",
            ]
            for entry in record.history
        ],
    )
