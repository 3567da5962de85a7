"""`coordinator serve --tls-cert --tls-key`: HTTPS with a certificate made for the test."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from bench.server import free_port, serve_process
from tests.factories import GROUP, TOPIC

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    trusted: ssl.SSLContext  # a client context trusting the certificate's CA, and no other


@pytest.fixture
def certificate(tmp_path: Path) -> Certificate:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for later in issued.cert_chain_pems[1:]:
        later.write_to_path(str(cert), append=True)
    # Verifying (certificate and host name) against this CA alone, not the system's.
    trusted = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(trusted)
    return Certificate(cert, key, trusted)


def _tls_args(certificate: Certificate) -> list[str]:
    return ["--tls-cert", str(certificate.cert), "--tls-key", str(certificate.key)]


def test_serve_with_a_certificate_speaks_https_and_not_plain_http(
    tmp_path: Path, database_url: str, certificate: Certificate
) -> None:
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=_tls_args(certificate),
        tls=certificate.trusted,
    ) as server:
        assert server.url.startswith("https://")
        health = httpx.get(f"{server.url}/health", verify=certificate.trusted, timeout=10)
        assert health.status_code == 200
        sent = httpx.post(
            f"{server.url}/v1/transactions",
            json={"topic": TOPIC, "producer_group": GROUP, "body_text": "over TLS"},
            verify=certificate.trusted,
            timeout=10,
        )
        assert sent.status_code == 201, sent.text

        plain = server.url.replace("https://", "http://")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{plain}/health", timeout=10)
        # A client that does not trust the certificate's CA refuses the server.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{server.url}/health", verify=ssl.create_default_context(), timeout=10)
    output = server.process.stdout.read().decode() if server.process.stdout else ""
    assert f"coordinator listening on {server.url} (API docs at /docs)" in output


def test_https_with_several_workers(
    tmp_path: Path, database_url: str, certificate: Certificate
) -> None:
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=[*_tls_args(certificate), "--workers", "2"],
        tls=certificate.trusted,
    ) as server:
        # New connections, so the kernel hands them to either worker.
        for _ in range(8):
            health = httpx.get(f"{server.url}/health", verify=certificate.trusted, timeout=10)
            assert health.status_code == 200


def _run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`coordinator serve ARGS`, which must fail before it starts anything (bounded)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--port", str(free_port()), *args],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["--tls-cert", "{cert}"],
            "--tls-cert needs --tls-key (or COORDINATOR_TLS_KEY_FILE) too: HTTPS takes a PEM "
            "certificate and its private key",
        ),
        (
            ["--tls-key", "{key}"],
            "--tls-key needs --tls-cert (or COORDINATOR_TLS_CERT_FILE) too",
        ),
        (
            ["--tls-cert", "{missing}", "--tls-key", "{key}"],
            "--tls-cert: cannot read {missing}: No such file or directory",
        ),
        (
            ["--tls-cert", "{cert}", "--tls-key", "{cert}"],
            "--tls-cert/--tls-key: {cert} and {cert} are not a PEM certificate and its private key",
        ),
    ],
    ids=["cert-without-key", "key-without-cert", "missing-file", "not-a-key"],
)
def test_wrong_tls_files_exit_2_with_a_sentence_before_anything_starts(
    tmp_path: Path, certificate: Certificate, args: list[str], sentence: str
) -> None:
    paths = {"cert": certificate.cert, "key": certificate.key, "missing": tmp_path / "nope.pem"}
    result = _run(tmp_path, *(arg.format(**paths) for arg in args))
    assert result.returncode == 2, result.stdout + result.stderr
    assert sentence.format(**paths) in result.stderr
    assert "Traceback" not in result.stderr
    # Refused before the database: no embedded server was started in the working directory.
    assert not (tmp_path / ".coordinator").exists()
