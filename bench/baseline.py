"""The raw SQL limit: what a transactional message costs Postgres, no coordinator in the path.

pgbench runs the statements a transactional message needs, on tables shaped
like the coordinator's but without its triggers and history: a half insert
(one transaction), then the commit (one transaction flipping the state and
making the message deliverable with one delivery row).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

import psycopg

from bench.database import BenchDatabase, pgbench_binary

SETUP = """
DROP TABLE IF EXISTS baseline_deliveries, baseline_messages;
CREATE TABLE baseline_messages (LIKE messages INCLUDING DEFAULTS INCLUDING IDENTITY
                                INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE baseline_deliveries (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_offset bigint NOT NULL,
    consumer_group text NOT NULL,
    visible_at timestamptz NOT NULL DEFAULT now()
);
"""

SCRIPT = r"""
INSERT INTO baseline_messages (message_id, transaction_id, kind, producer_group, topic, body,
                               state, next_check_at)
VALUES (md5(random()::text || clock_timestamp()::text),
        md5(random()::text || clock_timestamp()::text),
        'transactional', 'bench', 'bench', '\x6f72646572203130303120637265617465640a'::bytea,
        'prepared', now() + interval '6 seconds')
RETURNING id AS message_offset \gset
BEGIN;
UPDATE baseline_messages SET state = 'committed', resolved_at = now(),
       resolution_source = 'client', next_check_at = NULL
WHERE id = :message_offset AND state = 'prepared';
INSERT INTO baseline_deliveries (message_offset, consumer_group) VALUES (:message_offset, 'bench');
END;
"""


@dataclass(frozen=True)
class BaselineResult:
    messages_per_second: float
    latency_ms_avg: float
    clients: int
    seconds: float


def run_baseline(database: BenchDatabase, *, clients: int, seconds: float) -> BaselineResult:
    with psycopg.connect(database.url, autocommit=True) as conn:
        conn.execute(SETUP)
    url = urlparse(database.url)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(SCRIPT)
    env = {**os.environ, "PGUSER": url.username or "postgres"}
    if url.password:
        env["PGPASSWORD"] = url.password
    # The URL's `options` (the coordinator's search_path, where SETUP made the
    # tables) reach pgbench, which takes no URL, through libpq's environment.
    options = parse_qs(url.query).get("options")
    if options:
        env["PGOPTIONS"] = options[0]
    command = [
        pgbench_binary(),
        "-n",  # no vacuum of pgbench's own tables
        "-c", str(clients),
        "-j", str(min(clients, os.cpu_count() or 1)),
        "-T", str(int(seconds)),
        "-f", script.name,
        "-h", database.socket_dir or url.hostname or "localhost",
        "-p", str(url.port or 5432),
        url.path.lstrip("/"),
    ]  # fmt: skip
    try:
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    tps = float(re.search(r"tps = ([\d.]+)", out).group(1))  # type: ignore[union-attr]
    latency = float(re.search(r"latency average = ([\d.]+) ms", out).group(1))  # type: ignore[union-attr]
    # One pgbench "transaction" is one run of the script: one whole message.
    return BaselineResult(tps, latency, clients, seconds)
