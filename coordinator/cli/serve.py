"""`coordinator serve`: migrate the database, then serve HTTP."""

from __future__ import annotations

import logging
import logging.config
import signal
import socket
import ssl
import threading
from pathlib import Path
from types import FrameType

import psycopg
import typer

from coordinator import logs
from coordinator.cli import listening
from coordinator.cli.common import (
    EXIT_CANNOT_LISTEN,
    EXIT_USAGE,
    console,
    database_errors,
    err_console,
    fail,
    ready_url_for,
    settings_with_flags,
)
from coordinator.cli.defaults import setting_default
from coordinator.config import Settings, env_name
from coordinator.db.queries import execute_sync
from coordinator.db.ready import describe_database
from coordinator.db.urls import libpq_url, redact
from coordinator.domain.errors import DoorFailed
from coordinator.domain.hosts import is_loopback
from coordinator.node.process import serve_node
from coordinator.node.workers import serve_workers

log = logging.getLogger(__name__)

# uvicorn's default: connections the kernel holds before the app accepts them.
BACKLOG = 2048


# Every parameter but `workers` is named after the setting it overrides.
def serve(
    ctx: typer.Context,
    host: str | None = typer.Option(None, help=f"Listen address [{setting_default('host')}]."),
    port: int | None = typer.Option(None, help=f"Listen port [{setting_default('port')}]."),
    grpc_port: int | None = typer.Option(
        None,
        help="Also serve the RocketMQ 5 gRPC protocol on this port (official RocketMQ "
        f"clients) [{setting_default('grpc_port', {None: 'off'})}].",
    ),
    transaction_timeout_seconds: float | None = typer.Option(
        None,
        "--transaction-timeout",
        help="Seconds before the first check-back "
        f"[{setting_default('transaction_timeout_seconds')}].",
    ),
    check_interval_seconds: float | None = typer.Option(
        None,
        "--check-interval",
        help=f"Seconds between check-backs [{setting_default('check_interval_seconds')}].",
    ),
    check_max: int | None = typer.Option(
        None,
        "--check-max",
        help=f"Check-backs before a message is discarded [{setting_default('check_max')}].",
    ),
    retention_hours: float | None = typer.Option(
        None,
        "--retention-hours",
        help=f"Hours before an unresolved message expires [{setting_default('retention_hours')}].",
    ),
    max_body_bytes: int | None = typer.Option(
        None,
        "--max-body-bytes",
        help=f"Largest message body [{setting_default('max_body_bytes')}].",
    ),
    workers: int = typer.Option(
        1,
        min=1,
        help="Server processes sharing the port; all run check-backs (SKIP LOCKED keeps "
        "them apart).",
    ),
    reject_transactional_messages: bool | None = typer.Option(
        None,
        "--reject-transactional-messages/--accept-transactional-messages",
        help="Refuse half messages with HTTP 403 "
        f"[{setting_default('reject_transactional_messages', {False: 'accept', True: 'reject'})}].",
    ),
    insecure: bool | None = typer.Option(
        None,
        "--insecure",
        help="Serve without tokens on a non-loopback address (refused otherwise).",
    ),
    tls_cert_file: Path | None = typer.Option(
        None, "--tls-cert", metavar="FILE", help="PEM certificate: serve HTTPS (with --tls-key)."
    ),
    tls_key_file: Path | None = typer.Option(
        None, "--tls-key", metavar="FILE", help="PEM private key of --tls-cert."
    ),
) -> None:
    """Start the coordinator (embedded PostgreSQL unless a database URL is set)."""
    settings = settings_with_flags(ctx, not_settings={"workers"})
    # Checked before the database starts: a wrong file is a usage error, not a
    # traceback from uvicorn after Postgres is up.
    _check_tls(settings)
    if settings.grpc_port is not None:
        _check_grpc_extra()
    # The ports before the database: a busy port is a sentence in a moment,
    # not a traceback once PostgreSQL is up.
    http_socket = _bind_ports(settings)
    with http_socket:
        url = ready_url_for(settings, create=True)
        console.print(f"database: {describe_database(settings)}", highlight=False)
        if settings.read_database_url:
            shown = redact(libpq_url(settings.read_database_url))
            console.print(f"figures read from: {shown}", highlight=False, soft_wrap=True)
        with database_errors(settings):
            tokens = _live_tokens(url)
        _check_authentication(settings, tokens)
        if tokens:
            _warn_clear_text(settings, http_socket.getsockname()[1])
        _listen(http_socket, settings)
        _say_listening(settings, http_socket.getsockname()[1])
        _run(url, settings, workers, http_socket)


def _bind_ports(settings: Settings) -> socket.socket:
    try:
        http_socket = listening.bind(settings.host, settings.port, what="HTTP (--port)")
    except listening.CannotListen as error:
        raise fail(str(error), EXIT_CANNOT_LISTEN) from None
    grpc_port = settings.grpc_port
    if grpc_port is not None:
        if grpc_port == http_socket.getsockname()[1]:
            http_socket.close()
            raise fail(f"--grpc-port {grpc_port} is the HTTP port: give it another", EXIT_USAGE)
        try:
            listening.check_free(settings.host, grpc_port, what="gRPC (--grpc-port)")
        except listening.CannotListen as error:
            http_socket.close()
            raise fail(str(error), EXIT_CANNOT_LISTEN) from None
    return http_socket


def _listen(http_socket: socket.socket, settings: Settings) -> None:
    try:
        http_socket.listen(BACKLOG)
    except OSError as error:  # another SO_REUSEADDR socket took the port meanwhile
        raise fail(
            f"cannot listen for HTTP (--port) on {settings.host}:{settings.port}: {error.strerror}",
            EXIT_CANNOT_LISTEN,
        ) from None


def _say_listening(settings: Settings, port: int) -> None:
    scheme = "https" if settings.tls_cert_file else "http"
    console.print(
        f"coordinator listening on {scheme}://{_url_host(settings.host)}:{port} "
        "(API docs at /docs)",
        highlight=False,
    )
    if settings.grpc_port is not None:
        console.print(
            f"RocketMQ gRPC door on {_url_host(settings.host)}:{settings.grpc_port} "
            f"({'TLS' if settings.tls_cert_file else 'plaintext'})",
            highlight=False,
        )


def _run(url: str, settings: Settings, workers: int, http_socket: socket.socket) -> None:
    # Until the node takes the signals over (and after it gave them back), a
    # SIGTERM exits as Ctrl-C does: the default handler would end the process
    # without running atexit hooks, and the embedded server's hook stops
    # Postgres.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    log_config = logs.server_log_config(settings.log_format, settings.access_log)
    logging.config.dictConfig(log_config)
    if workers > 1:
        if serve_workers(url, settings, http_socket, workers, log_config) != 0:
            raise fail("the coordinator did not start: see the error above", 1)
        return
    started = threading.Event()
    try:
        serve_node(url, settings, [http_socket], on_started=started.set)
    except DoorFailed as error:
        raise fail(f"the coordinator did not start: {error}", EXIT_CANNOT_LISTEN) from None
    except Exception:
        log.exception("the coordinator stopped")
        happened = "stopped on an error" if started.is_set() else "did not start"
        raise fail(f"the coordinator {happened}: see the error above", 1) from None


def _check_grpc_extra() -> None:
    # Checked before Postgres starts: a missing extra is a usage error with a
    # sentence, not an ImportError from the node's start.
    from importlib.util import find_spec

    if find_spec("grpc") is None or find_spec("rocketmq") is None:
        raise fail(
            "--grpc-port needs the RocketMQ protocol modules: pip install 'coordinator[grpc]'",
            EXIT_USAGE,
        )


def _check_tls(settings: Settings) -> None:
    """Both TLS files or neither, each readable, together a certificate and its key."""
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None and key is None:
        return
    if cert is None or key is None:
        given, missing, field = (
            ("--tls-cert", "--tls-key", "tls_key_file")
            if key is None
            else ("--tls-key", "--tls-cert", "tls_cert_file")
        )
        raise fail(
            f"{given} needs {missing} (or {env_name(field)}) too: HTTPS takes a PEM "
            "certificate and its private key",
            EXIT_USAGE,
        )
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            path.read_bytes()
        except OSError as error:
            raise fail(f"{flag}: cannot read {path}: {error.strerror}", EXIT_USAGE) from None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            cert, key, password=_no_password
        )
    except _EncryptedKey:
        raise fail(
            f"--tls-key: {key} is encrypted; give the key without a passphrase", EXIT_USAGE
        ) from None
    except ssl.SSLError as error:
        # OpenSSL's reason (KEY_VALUES_MISMATCH...) when it has one; "PEM lib"
        # and the C source line it gives otherwise would tell a user nothing.
        reason = f" ({error.reason})" if error.reason else ""
        raise fail(
            f"--tls-cert/--tls-key: {cert} and {key} are not a PEM certificate and its "
            f"private key{reason}",
            EXIT_USAGE,
        ) from None


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would ask for the passphrase on the terminal,
    # and so would uvicorn, which is given none either.
    raise _EncryptedKey


def _live_tokens(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = execute_sync(conn, "count_active_tokens").fetchone()
    return int(row[0]) if row else 0


def _check_authentication(settings: Settings, tokens: int) -> None:
    """Say whether requests need a token; refuse to serve a public port without any."""
    if tokens:
        console.print(
            f"authentication is on ({tokens} token{'s' if tokens != 1 else ''})", highlight=False
        )
        return
    host = settings.host
    if is_loopback(host):
        console.print(
            "authentication is off (no token exists): listening on loopback only",
            highlight=False,
        )
        return
    if not settings.insecure:
        raise fail(
            f"refusing to listen on {host} without authentication: create a token with "
            "`coordinator tokens create`, listen on 127.0.0.1, or pass --insecure",
            EXIT_USAGE,
        )
    # On every start, so an --insecure left in a unit file is never forgotten.
    # soft_wrap keeps it one line in a log, where rich would wrap at 80 columns.
    err_console.print(
        f"[red]warning: authentication is off (no token exists, --insecure) on {host}: "
        f"anyone who can reach port {settings.port} can take over the transactions "
        "(send, commit, roll back, read every message); create a token with "
        "`coordinator tokens create`[/red]",
        highlight=False,
        soft_wrap=True,
    )


def _warn_clear_text(settings: Settings, http_port: int) -> None:
    """Warn when tokens would cross a network unencrypted: a door beyond loopback without TLS.

    Both doors listen on the same host and take the same certificate, so
    they are either both encrypted or both plain text; each is named.
    """
    if is_loopback(settings.host) or settings.tls_cert_file:
        return
    host = _url_host(settings.host)
    doors = [f"HTTP on {host}:{http_port}"]
    if settings.grpc_port is not None:
        doors.append(f"the RocketMQ gRPC door on {host}:{settings.grpc_port}")
    are = "are" if len(doors) > 1 else "is"
    # On every start, like the --insecure warning; one line in a log.
    err_console.print(
        f"[red]warning: tokens cross the network in clear text: {' and '.join(doors)} {are} "
        "not encrypted, so anyone on the path can read a token and act with it; serve TLS "
        "with --tls-cert and --tls-key, or listen on 127.0.0.1[/red]",
        highlight=False,
        soft_wrap=True,
    )


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # A stop asked for and done cleanly is a success: exit 0, as on Ctrl-C
    # (a service manager would take 143 for a failure).
    raise SystemExit(0)
