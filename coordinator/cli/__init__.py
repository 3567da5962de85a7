"""`coordinator`: serve, migrate, inspect and manage tokens."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from coordinator.cli import consumers, db, inspect, operator, serve, tokens
from coordinator.cli import pipeline as pipeline_cli
from coordinator.cli.common import make_settings

app = typer.Typer(
    name="coordinator",
    help="Transactional messages (RocketMQ semantics) with all state in PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help texts say "[default: ...]" literally; do not read them as markup.
    rich_markup_mode=None,
)


@app.callback()
def main_options(
    ctx: typer.Context,
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        envvar="COORDINATOR_DATABASE_URL",
        help="PostgreSQL URL. Unset: use the embedded server under --data-dir.",
        show_envvar=True,
    ),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        envvar="COORDINATOR_DATA_DIR",
        help="Data directory of the embedded server [default: .coordinator].",
        show_envvar=True,
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log more."),
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    ctx.ensure_object(dict)["settings"] = make_settings(database_url, data_dir)


app.command("serve")(serve.serve)
app.add_typer(db.app, name="db")
app.command("status")(inspect.status)
app.add_typer(inspect.tx_app, name="tx")
operator.add_tx_commands(inspect.tx_app)  # tx recheck | commit | rollback
app.command("producers")(operator.producers)
app.command("subscriptions")(consumers.subscriptions)
app.add_typer(consumers.dlq_app, name="dlq")
app.add_typer(tokens.app, name="tokens")
app.add_typer(pipeline_cli.app, name="pipeline")  # Spark jobs; pyspark loaded only when run


def main() -> None:
    app()
