"""The `coordinator` command against a real database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.db.embedded import bundled_program
from coordinator.db.urls import redact
from coordinator.domain.messages import SendResult
from coordinator.domain.states import Resolution
from tests.factories import end, half

runner = CliRunner()


def invoke(database_url: str, *args: str):
    return runner.invoke(app, ["--database-url", database_url, *args], catch_exceptions=False)


@pytest.fixture
def committed(database_url: str) -> SendResult:
    """One committed and one pending transaction (the CLI runs its own event loop)."""

    async def seed() -> SendResult:
        async with Coordinator.connect(database_url) as core:
            sent = await core.transactions.prepare(half(tags="created", keys=("order-1001",)))
            await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
            await core.transactions.prepare(half(topic="payments"))
            return sent

    return asyncio.run(seed())


def test_status_shows_counts_and_the_oldest_pending(
    database_url: str, committed: SendResult
) -> None:
    result = invoke(database_url, "status")
    assert result.exit_code == 0, result.output
    assert "committed" in result.output and "prepared" in result.output
    assert "payments" in result.output and "order-producers" in result.output
    assert "1 pending; oldest: transaction" in result.output


def test_tx_show_finds_a_message_by_any_id(database_url: str, committed: SendResult) -> None:
    for ident in (committed.transaction_id, committed.message_id, str(committed.offset)):
        result = invoke(database_url, "tx", "show", ident)
        assert result.exit_code == 0, result.output
        assert committed.message_id in result.output
        assert "order 1001 created" in result.output
        assert "prepared" in result.output and "committed" in result.output  # history rows


def test_tx_show_of_an_unknown_id_exits_3_with_a_sentence(database_url: str) -> None:
    result = invoke(database_url, "tx", "show", "nothing-like-this")
    assert result.exit_code == 3
    assert "no message with offset, transaction id or message id 'nothing-like-this'" in (
        result.output
    )


def test_tx_show_and_commit_of_an_id_two_groups_use_need_the_producer_group(
    database_url: str,
) -> None:
    async def seed() -> tuple[SendResult, SendResult]:
        async with Coordinator.connect(database_url) as core:
            a = await core.transactions.prepare(half(producer_group="group-a", message_id="ID-1"))
            b = await core.transactions.prepare(half(producer_group="group-b", message_id="ID-1"))
            return a, b

    a, b = asyncio.run(seed())
    for command in ("show", "commit"):
        ambiguous = invoke(database_url, "tx", command, "ID-1")
        assert ambiguous.exit_code == 4, ambiguous.output
        assert "ambiguous" in ambiguous.output and "'group-a'" in ambiguous.output
        assert "--producer-group" in ambiguous.output
    shown = invoke(database_url, "tx", "show", "ID-1", "--producer-group", "group-b", "--json")
    assert shown.exit_code == 0, shown.output
    assert f'"offset": {b.offset}' in shown.output
    done = invoke(database_url, "tx", "commit", "ID-1", "--producer-group", "group-a")
    assert done.exit_code == 0 and f"offset {a.offset}" in done.output, done.output


def test_db_commands_migrate_down_and_up(database_url: str) -> None:
    heads = ", ".join(migrate.head_revisions())
    current = invoke(database_url, "db", "current")
    assert current.exit_code == 0 and f"current:  {heads}" in current.output

    down = invoke(database_url, "db", "downgrade", "base")
    assert down.exit_code == 0 and "revision base" in down.output
    assert "not up to date" in invoke(database_url, "db", "current").output

    up = invoke(database_url, "db", "upgrade")
    assert up.exit_code == 0 and f"revision {heads}" in up.output
    assert invoke(database_url, "status").exit_code == 0


def test_a_bad_flag_is_a_usage_error(database_url: str) -> None:
    result = runner.invoke(app, ["serve", "--port", "not-a-port"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("flags", "sentence"),
    [
        (["--check-max", "0"], "--check-max=0: input should be greater than or equal to 1"),
        (["--port", "70000"], "--port=70000: input should be less than or equal to 65535"),
        (["--transaction-timeout", "0"], "--transaction-timeout=0.0: input should be greater"),
    ],
)
def test_a_flag_out_of_range_is_a_usage_error(flags: list[str], sentence: str) -> None:
    result = runner.invoke(app, ["serve", *flags], catch_exceptions=False)
    assert result.exit_code == 2
    assert sentence in result.output
    assert "Traceback" not in result.output


def test_a_wrong_setting_in_the_environment_is_a_sentence() -> None:
    result = runner.invoke(
        app, ["status"], env={"COORDINATOR_CHECK_MAX": "0"}, catch_exceptions=False
    )
    assert result.exit_code == 2
    assert "COORDINATOR_CHECK_MAX='0': input should be greater than or equal to 1" in (
        result.output
    )


def test_an_unreachable_database_exits_5_with_a_sentence() -> None:
    url = "postgresql://nobody@/nowhere?host=/nonexistent"
    result = runner.invoke(app, ["--database-url", url, "status"], catch_exceptions=False)
    assert result.exit_code == 5
    assert "cannot reach the database" in result.output


def test_serve_on_an_unreachable_database_exits_5_with_a_sentence() -> None:
    url = "postgresql://nobody@127.0.0.1:1/nowhere"
    result = runner.invoke(app, ["--database-url", url, "serve"], catch_exceptions=False)
    assert result.exit_code == 5
    assert "cannot reach the database" in result.output
    assert "Traceback" not in result.output


def test_db_downgrade_takes_a_relative_revision(database_url: str) -> None:
    heads = migrate.head_revisions()
    down = invoke(database_url, "db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    (below,) = migrate.current_revisions(database_url)
    assert below not in heads and f"revision {below}" in down.output
    up = invoke(database_url, "db", "upgrade", "+1")
    assert up.exit_code == 0, up.output
    assert migrate.current_revisions(database_url) == heads


@pytest.mark.parametrize(
    "args", [("db", "upgrade", "nosuch"), ("db", "downgrade", "nosuch"), ("db", "upgrade", "-1")]
)
def test_a_bad_revision_is_a_sentence(database_url: str, args: tuple[str, ...]) -> None:
    result = invoke(database_url, *args)
    assert result.exit_code == 2
    assert f"error: cannot migrate to revision {args[2]!r}: " in result.output
    assert "Traceback" not in result.output and len(result.output.splitlines()) == 1


UNREACHABLE = "postgresql://x@127.0.0.1:1/db"


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("serve",),
        ("db", "current"),
        ("db", "upgrade"),
        ("db", "downgrade", "-1"),
        ("tx", "show", "1"),
        ("tx", "commit", "1"),
        ("producers",),
        ("subscriptions",),
        ("dlq", "list"),
        ("dlq", "requeue", "1"),
        ("tokens", "list"),
        ("tokens", "create", "ops", "--admin"),
        ("tokens", "revoke", "ops"),
    ],
)
def test_an_unreachable_database_is_one_sentence_and_exit_5(args: tuple[str, ...]) -> None:
    result = runner.invoke(app, ["--database-url", UNREACHABLE, *args], catch_exceptions=False)
    assert result.exit_code == 5, result.output
    assert result.output.startswith(
        f"error: cannot reach the database ({UNREACHABLE}): connection failed: "
    )
    assert "Connection refused; is the server running" in result.output
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize("command", [("serve",), ("status",), ("db", "current")])
def test_the_database_options_also_follow_the_command(command: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*command, "--database-url", UNREACHABLE], catch_exceptions=False)
    assert result.exit_code == 5, result.output
    assert f"cannot reach the database ({UNREACHABLE})" in result.output


READING_COMMANDS = [
    ("status",),
    ("tx", "show", "1"),
    ("tx", "recheck", "1"),
    ("producers",),
    ("subscriptions",),
    ("dlq", "list"),
    ("dlq", "requeue", "1"),
    ("tokens", "list"),
    ("tokens", "revoke", "ops"),
    ("db", "current"),
    ("db", "downgrade", "-1"),
    ("db", "url"),
    ("psql",),
]


@pytest.mark.parametrize("args", READING_COMMANDS)
def test_no_embedded_database_where_a_command_looks_is_refused_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.delenv("COORDINATOR_DATABASE_URL", raising=False)
    monkeypatch.delenv("COORDINATOR_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 5, result.output
    assert f"error: no coordinator database in {tmp_path / '.coordinator'} " in result.output
    assert "--data-dir" in result.output and "--database-url" in result.output
    assert not (tmp_path / ".coordinator").exists()

    elsewhere = tmp_path / "elsewhere"
    after = runner.invoke(app, [*args, "--data-dir", "elsewhere"], catch_exceptions=False)
    assert f"no coordinator database in {elsewhere} " in after.output
    assert not elsewhere.exists()


def test_verbose_says_which_database_a_command_uses(database_url: str) -> None:
    result = runner.invoke(
        app, ["-v", "--database-url", database_url, "status"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert f"database: {redact(database_url)}" in result.stderr


def test_db_current_shows_no_password_mask_without_a_password(database_url: str) -> None:
    assert ":" not in database_url.split("@")[0].removeprefix("postgresql://")  # no password
    result = invoke(database_url, "db", "current")
    assert result.exit_code == 0 and f"database: {database_url}" in result.output
    assert "***" not in result.output


def test_db_url_hides_a_password_unless_asked() -> None:
    url = "postgresql://app:s3cret@db.example:5432/coordinator"
    hidden = runner.invoke(app, ["--database-url", url, "db", "url"], catch_exceptions=False)
    # Sessions on the printed URL land in the coordinator's schema.
    in_schema = "?options=-c%20search_path%3Dcoordinator"
    assert hidden.stdout == f"postgresql://app:***@db.example:5432/coordinator{in_schema}\n"
    shown = runner.invoke(app, ["db", "url", "--show-password", "--database-url", url])
    assert shown.stdout == f"{url}{in_schema}\n"


def test_db_url_is_a_url_psql_accepts(database_url: str) -> None:
    printed = invoke(database_url, "db", "url").stdout.strip()
    psql = bundled_program("psql")
    assert psql is not None
    answer = subprocess.run(
        [str(psql), printed, "-At", "-c", "SELECT count(*) FROM messages"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == "0"


def test_psql_runs_on_the_coordinators_database_with_the_arguments_given(
    database_url: str, committed: SendResult
) -> None:
    # psql writes to the terminal (file descriptors), not to CliRunner's streams.
    command = [sys.executable, "-m", "coordinator", "--database-url", database_url, "psql"]
    query = ["-At", "-c", "SELECT message_id FROM messages ORDER BY id"]
    answer = subprocess.run([*command, *query], capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.splitlines()[0] == committed.message_id
    # psql's own exit code comes through
    failed = subprocess.run(
        [*command, "-c", "SELECT nosuch"], capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1 and 'column "nosuch" does not exist' in failed.stderr
