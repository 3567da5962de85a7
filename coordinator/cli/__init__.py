"""`coordinator`: serve, migrate, inspect and manage tokens."""

from __future__ import annotations

from pathlib import Path

import typer

from coordinator import logs
from coordinator.cli import (
    check_sources,
    config_show,
    consumers,
    db,
    inspect,
    operator,
    psql,
    serve,
    status,
    tokens,
)
from coordinator.cli import pipeline as pipeline_cli
from coordinator.cli.common import cli_state, remember_global_flag
from coordinator.cli.defaults import setting_default
from coordinator.cli.global_options import CoordinatorGroup
from coordinator.cli.sources import CONFIG_VARIABLE

app = typer.Typer(
    name="coordinator",
    cls=CoordinatorGroup,
    help="Transactional messages (RocketMQ semantics) with all state in PostgreSQL. "
    "--database-url, --read-database-url, --data-dir and --config may also follow the command.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help texts say "[default: ...]" literally; do not read them as markup.
    rich_markup_mode=None,
)


@app.callback()
def main_options(
    ctx: typer.Context,
    # The environment and the config file are read with every other setting
    # (cli/sources.py), which knows where each value came from.
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        metavar="URL",
        help="PostgreSQL URL [env: COORDINATOR_DATABASE_URL]. Unset: the embedded server "
        "under --data-dir.",
    ),
    read_database_url: str | None = typer.Option(
        None,
        "--read-database-url",
        metavar="URL",
        help="PostgreSQL URL the status figures and the pipeline's report and audit read "
        "from, typically a standby [env: COORDINATOR_READ_DATABASE_URL]. Unset: the database "
        "above.",
    ),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        metavar="DIR",
        help="Data directory of the embedded server [env: COORDINATOR_DATA_DIR; "
        f"{setting_default('data_dir')}].",
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        metavar="FILE",
        help=f"TOML file of settings [env: {CONFIG_VARIABLE}]; the environment and flags win "
        "over it.",
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Log more, and say which database is used."
    ),
) -> None:
    # --database-url, --read-database-url, --data-dir and --config may also come after the command
    # (global_options.py); settings are read when the command needs them.
    logs.configure(verbose=verbose)
    state = cli_state(ctx)
    state["verbose"], state["config_file"] = verbose, config
    remember_global_flag(ctx, "database_url", database_url)
    remember_global_flag(ctx, "read_database_url", read_database_url)
    remember_global_flag(ctx, "data_dir", data_dir)


app.command("serve")(serve.serve)
app.add_typer(db.app, name="db")
app.command("psql", context_settings=psql.PASS_ARGUMENTS_ON, options_metavar="[PSQL ARGS]...")(
    psql.psql
)
app.add_typer(config_show.app, name="config")
app.command("status")(status.status)
app.add_typer(inspect.tx_app, name="tx")
operator.add_tx_commands(inspect.tx_app)  # tx recheck | commit | rollback
# `producers` lists; `producers check-source set|show|remove` manages check sources.
producers_app = typer.Typer(no_args_is_help=False)
producers_app.callback(invoke_without_command=True)(operator.producers)
producers_app.add_typer(check_sources.app, name="check-source")
app.add_typer(producers_app, name="producers")
app.command("subscriptions")(consumers.subscriptions)
app.add_typer(consumers.dlq_app, name="dlq")
app.add_typer(tokens.app, name="tokens")
app.add_typer(pipeline_cli.app, name="pipeline")  # pipeline jobs; pyspark loaded only when run


def main() -> None:
    app()
