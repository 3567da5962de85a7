"""What a browser can be made to do against the HTTP door, attack by attack.

A page can make the user's browser call the coordinator: under the page's
own name, after pointing it at 127.0.0.1 (DNS rebinding: the browser then
lets the page read the answers), or cross-origin (the page reads nothing,
but a write happens all the same). And a request with two Authorization
headers must not be read one way by the hot routes and another by FastAPI's.

Three servers serve the whole module (each test reuses them): one without
tokens on loopback that also answers `coordinator.internal`, and two on a
database with a token, one answering any Host and one listing
`coordinator.internal` in allowed_hosts.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pytest_postgresql.executors.noop import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from starlette.routing import Mount, Route

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.access import Grants
from coordinator.http import create_app
from tests.configs import configs
from tests.conftest import LiveServer, url_for
from tests.factories import GROUP, TOPIC
from tests.fastapi_routes import api_routes

SECURITY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
LISTED = "coordinator.internal"
ATTACKER = "attacker.example"
CONSUMERS = "billing"


@pytest.fixture(scope="module")
def databases(postgresql_proc: NoopExecutor) -> Iterator[dict[str, str]]:
    """Two migrated databases of this module's own: "open" (no token) and "tokens"."""
    janitors = {
        kind: DatabaseJanitor(
            user=postgresql_proc.user,
            host=postgresql_proc.host,
            port=postgresql_proc.port,
            # pytest may be pointed at a shared server
            dbname=f"security_http_{kind}_{os.getpid()}",
            template_dbname=postgresql_proc.template_dbname,
            maintenance_dbname=postgresql_proc.maintenance_dbname,
            password=postgresql_proc.password,
        )
        for kind in ("open", "tokens")
    }
    entered: list[DatabaseJanitor] = []
    try:
        for janitor in janitors.values():
            janitor.__enter__()
            entered.append(janitor)
        yield {
            kind: url_for(
                postgresql_proc.host,
                postgresql_proc.port,
                postgresql_proc.user,
                janitor.dbname,
                postgresql_proc.password or None,
            )
            for kind, janitor in janitors.items()
        }
    finally:
        for janitor in reversed(entered):
            janitor.__exit__(None, None, None)


@pytest.fixture(scope="module")
def token(databases: dict[str, str]) -> str:
    async def create() -> str:
        async with Coordinator.connect(databases["tokens"]) as core:
            return (await core.tokens.create("everything", Grants.everything())).token

    return asyncio.run(create())


def _client(server: LiveServer, **headers: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def open_http(databases: dict[str, str]) -> Iterator[httpx.Client]:
    settings = Settings(database_url=None, allowed_hosts=(LISTED,))
    with LiveServer(databases["open"], settings) as server, _client(server) as client:
        yield client


@pytest.fixture(scope="module")
def token_http(databases: dict[str, str], token: str) -> Iterator[httpx.Client]:
    # The token exists before the server starts: it authenticates from the first request.
    with (
        LiveServer(databases["tokens"], Settings(database_url=None)) as server,
        _client(server, authorization=f"Bearer {token}") as client,
    ):
        yield client


@pytest.fixture(scope="module")
def listed_http(databases: dict[str, str], token: str) -> Iterator[httpx.Client]:
    settings = Settings(database_url=None, allowed_hosts=(LISTED,))
    with (
        LiveServer(databases["tokens"], settings) as server,
        _client(server, authorization=f"Bearer {token}") as client,
    ):
        yield client


def refused(response: httpx.Response, status: int, error: str, phrase: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error and phrase in body["message"], body


def _host(name: str, http: httpx.Client) -> dict[str, str]:
    """A Host header naming `name`, with the server's port."""
    return {"host": f"{name}:{http.base_url.port}"}


def _prepare(http: httpx.Client, **headers: str) -> dict:
    body = {"topic": TOPIC, "producer_group": GROUP, "body_text": "order 1001"}
    response = http.post("/v1/transactions", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def _state(http: httpx.Client, transaction_id: str) -> str:
    response = http.get(f"/v1/transactions/{transaction_id}")
    assert response.status_code == 200, response.text
    return response.json()["state"]


ROLLBACK = {"producer_group": GROUP, "resolution": "rollback"}


# --- DNS rebinding ----------------------------------------------------------------


def test_without_tokens_a_rebound_page_can_neither_read_nor_end_a_transaction(
    open_http: httpx.Client,
) -> None:
    sent = _prepare(open_http)
    tid = sent["transaction_id"]
    attacker = _host(ATTACKER, open_http)
    phrase = f"does not answer to the host name '{ATTACKER}'"
    for response in (
        open_http.get(f"/v1/offsets/{sent['offset']}", headers=attacker),
        open_http.get(f"/v1/transactions/{tid}", headers=attacker),
        open_http.post(f"/v1/transactions/{tid}/end", json=ROLLBACK, headers=attacker),
        open_http.post(
            "/v1/transactions",
            json={"topic": TOPIC, "producer_group": GROUP, "body_text": "forged"},
            headers=attacker,
        ),
        open_http.get("/v1/status", headers=attacker),
        open_http.get("/", headers={"host": ATTACKER}),
    ):
        refused(response, 400, "host_not_allowed", phrase)
    refused(
        open_http.get("/v1/status", headers={"host": f"{ATTACKER}:http"}),
        400,
        "host_not_allowed",
        "is not a host name",
    )
    assert _state(open_http, tid) == "prepared"
    # Loopback names, with any port, and the listed name are answered.
    for name in ("localhost", "LocalHost.", "api.localhost", "127.0.0.2", "[::1]", LISTED):
        response = open_http.get(f"/v1/transactions/{tid}", headers=_host(name, open_http))
        assert response.status_code == 200, (name, response.text)
    assert open_http.get("/v1/status", headers={"host": "127.0.0.1"}).status_code == 200
    # Probes call /health by address: it tells nothing, and answers any name.
    assert open_http.get("/health", headers=attacker).status_code == 200


def test_with_tokens_any_host_is_answered_unless_allowed_hosts_names_some(
    token_http: httpx.Client, listed_http: httpx.Client
) -> None:
    # A rebound page has no token: the token is what protects this server.
    assert token_http.get("/v1/status", headers=_host(ATTACKER, token_http)).status_code == 200
    # An operator who lists the server's names gets them enforced as well.
    refused(
        listed_http.get("/v1/status", headers=_host(ATTACKER, listed_http)),
        400,
        "host_not_allowed",
        f"does not answer to the host name '{ATTACKER}': it answers loopback names",
    )
    for name in (LISTED, "127.0.0.1", "localhost"):
        response = listed_http.get("/v1/status", headers=_host(name, listed_http))
        assert response.status_code == 200, (name, response.text)


# --- cross-origin writes ------------------------------------------------------------

CROSS_ORIGIN = (
    {"origin": f"http://{ATTACKER}"},
    {"origin": "null"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},  # another port's page on this host
)


def _writes(tid: str) -> list[tuple[str, str, dict]]:
    """A write on each kind of route: hot (prepare, end) and FastAPI's."""
    return [
        ("POST", "/v1/transactions", {"topic": TOPIC, "producer_group": GROUP, "body_text": "x"}),
        ("POST", f"/v1/transactions/{tid}/end", ROLLBACK),
        ("PUT", f"/v1/consumer-groups/{CONSUMERS}/subscriptions/{TOPIC}", {}),
        ("DELETE", f"/v1/consumer-groups/{CONSUMERS}/subscriptions/{TOPIC}", {}),
    ]


@pytest.mark.parametrize("server", ["open", "token"])
def test_a_cross_origin_page_may_change_nothing_and_call_no_api(
    server: str, request: pytest.FixtureRequest
) -> None:
    http: httpx.Client = request.getfixturevalue(f"{server}_http")
    tid = _prepare(http)["transaction_id"]
    other_port = {"origin": f"http://127.0.0.1:{http.base_url.port + 1}"}
    for headers in (*CROSS_ORIGIN, other_port):
        for method, path, body in _writes(tid):
            response = http.request(method, path, json=body, headers=headers)
            refused(response, 403, "cross_origin_write", "may not call this API")
    assert _state(http, tid) == "prepared"
    subscriptions = http.get(f"/v1/consumer-groups/{CONSUMERS}/subscriptions")
    assert subscriptions.json() == {"subscriptions": []}, subscriptions.text
    # Nor may it call the API with a GET: the long poll hands check requests over.
    for headers in CROSS_ORIGIN:
        for path in (
            f"/v1/producers/{GROUP}/instances/forged/checks?wait_seconds=0",
            f"/v1/transactions/{tid}",
            "/metrics",
        ):
            refused(http.get(path, headers=headers), 403, "cross_origin_write", "may not call")
    producers = http.get("/v1/producers", params={"producer_group": GROUP}).json()["producers"]
    assert "forged" not in str(producers), producers
    # Its pages may be linked to from anywhere.
    linked = http.get("/", headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"})
    assert linked.status_code == 200 and "access-control-allow-origin" not in linked.headers
    # The server's own pages (the status page, /docs) may write.
    own = {"origin": str(http.base_url).rstrip("/"), "sec-fetch-site": "same-origin"}
    ended = http.post(f"/v1/transactions/{tid}/end", json=ROLLBACK, headers=own)
    assert ended.status_code == 200 and ended.json()["state"] == "rolled_back", ended.text


# --- two Authorization headers --------------------------------------------------------


def test_two_authorization_headers_are_refused_on_hot_and_fastapi_routes(
    token_http: httpx.Client, open_http: httpx.Client, token: str
) -> None:
    body = {"topic": TOPIC, "producer_group": GROUP, "body_text": "x"}
    for http in (token_http, open_http):
        for pair in (
            [f"Bearer {token}", "Bearer coord_made-up"],
            ["Bearer coord_made-up", f"Bearer {token}"],
        ):
            headers = httpx.Headers([("authorization", value) for value in pair])
            for response in (
                httpx.post(http.base_url.join("/v1/transactions"), json=body, headers=headers),
                httpx.get(http.base_url.join("/v1/status"), headers=headers),
            ):
                refused(response, 400, "invalid_request", "send one Authorization header")


# --- pages open without a token -------------------------------------------------------


def _open_pages() -> set[str]:
    """The pages docs/security.md says anyone may GET (`/path` or `/prefix/*`):
    the first column of the table under "Open without a token"."""
    text = SECURITY_PAGE.read_text()
    section = text.split("## Open without a token", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| ")]
    return {page for cell in first_cells for page in re.findall(r"`GET (/[^`\s]*)`", cell)}


def _get_paths() -> dict[str, str]:
    """Every GET route of the app, as security.md names it, with a path to request."""
    app = create_app(configs().http).app
    paths = {}
    for route in api_routes(app):
        if "GET" in route.methods:
            paths[route.path] = re.sub(r"\{[^}]+\}", "x", route.path)
    for route in app.routes:
        if isinstance(route, Mount):
            paths[f"{route.path}/*"] = f"{route.path}/x"
        elif isinstance(route, Route) and "GET" in (route.methods or ()):
            paths[route.path] = route.path  # FastAPI's own: /openapi.json
    return paths


def test_the_pages_open_without_a_token_are_those_security_md_lists(
    token_http: httpx.Client,
) -> None:
    listed = _open_pages()
    assert {"/", "/status", "/docs", "/openapi.json", "/health"} <= listed
    paths = _get_paths()
    assert listed <= paths.keys()
    with httpx.Client(base_url=token_http.base_url, timeout=30) as anyone:
        for page, path in paths.items():
            answer = anyone.get(path)
            if page in listed:
                # A mount answers 404 for a file it lacks: open, but nothing at x.
                assert answer.status_code in ((404,) if page.endswith("/*") else (200,)), page
            else:
                refused(answer, 401, "unauthenticated", "needs a token")
        assert anyone.get("/static/status.js").status_code == 200
        assert anyone.get("/docs-assets/swagger-ui.css").status_code == 200
