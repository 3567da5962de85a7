"""The hot routes are the FastAPI routes they stand for, and answer what those declare.

The route table (coordinator/http/route_table.py) declares each route once;
it registers the route with FastAPI, and HotRoutes (hot_routes.py) serves
the hot ones without FastAPI's dispatch. These tests hold both to the
declaration: the matcher against FastAPI's dispatch and the OpenAPI
document, the answers (taken raw off a live server, built from real
results) against the models the route declares for their status codes.
"""

from __future__ import annotations

import asyncio
import json
import re
import types
import typing
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Path
from pydantic import BaseModel
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from coordinator.config import Settings
from coordinator.core.auth import Authenticator
from coordinator.core.configs import ServiceConfigs
from coordinator.core.context import CoreContext
from coordinator.http import create_app, routes
from coordinator.http.hot_routes import HotRoutes
from coordinator.http.route_table import Route, RouteTable
from coordinator.http.schemas import ErrorOut
from tests.configs import configs
from tests.conftest import LiveServer
from tests.factories import GROUP, TOPIC
from tests.fastapi_routes import api_routes

# The routes every transactional message goes through (prepare, then end):
# served by HotRoutes for speed, which is lost without a word if one drops out.
EXPECTED_HOT = {"prepare", "prepare_batch", "end", "end_batch", "send", "send_batch"}


@pytest.fixture(scope="module")
def served() -> HotRoutes:
    # The app is only built here: it opens nothing (the node attaches the core).
    return create_app(configs().http)


def _sample_path(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "7", template)


def _fastapi_route(app: FastAPI, method: str, path: str) -> Any:
    """The route FastAPI dispatches a request to: the first that matches fully."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for route in api_routes(app):
        if route.matches(scope)[0] == Match.FULL:
            return route
    return None


def test_the_sending_and_ending_routes_are_the_hot_ones(served: HotRoutes) -> None:
    hot = served.matcher.routes
    assert {route.name for route in hot} == EXPECTED_HOT
    assert len(hot) == len(EXPECTED_HOT)
    assert {route.name for route in routes.table.hot} == EXPECTED_HOT


# The one documented operation the table does not declare: Prometheus' text
# format, not a JSON answer, behind a token check of its own (metrics_open).
NOT_IN_THE_TABLE = {("GET", "/metrics")}


def test_every_documented_operation_is_declared_in_the_route_table(served: HotRoutes) -> None:
    documented = {
        (method.upper(), path)
        for path, operations in served.app.openapi()["paths"].items()
        for method in operations
    }
    declared = {(route.method, route.path) for route in routes.table.routes}
    assert documented - declared == NOT_IN_THE_TABLE
    assert declared <= documented


def test_each_declared_route_is_registered_as_declared(served: HotRoutes) -> None:
    document = served.app.openapi()["paths"]
    for declared in routes.table.routes:
        registered = [
            route
            for route in api_routes(served.app)
            if route.path == declared.path and declared.method in route.methods
        ]
        assert len(registered) == 1, (declared.method, declared.path)
        route = registered[0]
        assert route.name == declared.name
        assert route.response_model is declared.answer
        assert route.status_code == declared.status_code
        operation = document[declared.path][declared.method.lower()]
        if declared.body is None:
            assert route.body_field is None
            assert "requestBody" not in operation
        else:
            assert route.body_field.field_info.annotation == declared.body
            optional = type(None) in typing.get_args(declared.body)
            assert operation["requestBody"].get("required", False) is not optional
            if not optional:
                body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
                assert body_schema == {"$ref": f"#/components/schemas/{declared.body.__name__}"}
        parameters = operation.get("parameters", [])
        assert [p["name"] for p in parameters if p["in"] == "path"] == [
            name for name, _ in declared.path_parameters
        ]
        assert [p["name"] for p in parameters if p["in"] == "query"] == [
            name for name, _, _ in declared.query_parameters
        ]


def _answers_itself(served: HotRoutes, method: str, path: str) -> bool:
    """Whether HotRoutes answers a request itself rather than pass it to FastAPI.

    With a limit of no bytes, a hot route refuses any body before it needs the
    core; what is passed on reaches a stand-in for the FastAPI app.
    """
    passed_on: list[str] = []

    async def fastapi(scope: Scope, receive: Receive, send: Send) -> None:
        passed_on.append(scope["path"])

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    limited = HotRoutes(served.app, routes.table.routes, max_bytes=0)
    limited.app = fastapi  # type: ignore[assignment]
    limited.state = types.SimpleNamespace(authenticator=_open_authenticator())
    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(limited(scope, receive, send))
    return not passed_on


def test_hot_routes_claim_exactly_the_requests_fastapi_sends_to_them(served: HotRoutes) -> None:
    paths = {_sample_path(route.path) for route in api_routes(served.app)} | {
        "/v1/transactions/",
        "/v1/transactions/a/b/end",
        "/v1/transactions//end",
        "/v1/transactions/end-batch/end",
        "/v1/messages/batch/",
        "/nothing",
    }
    hot_names = {route.name for route in routes.table.hot}
    claimed = set()
    for method in ("POST", "GET", "PUT", "DELETE"):
        for path in paths:
            fastapi_route = _fastapi_route(served.app, method, path)
            fastapi_name = fastapi_route.name if fastapi_route else None
            found = served.matcher.match(method, path)
            assert _answers_itself(served, method, path) is (found is not None), (method, path)
            if fastapi_name in hot_names:
                assert found is not None, (method, path)
                assert found[0].name == fastapi_name, (method, path)
                claimed.add(found[0].name)
            else:
                assert found is None, (method, path, found)
    assert claimed == hot_names


def test_hot_path_parameters_are_read_as_fastapi_reads_them(served: HotRoutes) -> None:
    path = "/v1/transactions/tx-1/end"
    found = served.matcher.match("POST", path)
    assert found is not None
    scope = {"type": "http", "method": "POST", "path": path, "root_path": ""}
    _, child_scope = _fastapi_route(served.app, "POST", path).matches(scope)
    assert found[1] == child_scope["path_params"] == {"transaction_id": "tx-1"}


class Thing(BaseModel):
    name: str


class Named(BaseModel):
    name: str
    called: str


def _table() -> tuple[FastAPI, RouteTable]:
    router = APIRouter()
    table = RouteTable(router)
    return FastAPI(), table


def _open_authenticator() -> Authenticator:
    """As on a loopback server without tokens: every request is anonymous."""
    context = CoreContext(pool=None)  # type: ignore[arg-type]
    return Authenticator(context, ServiceConfigs.from_settings(Settings()).auth)


def test_a_hot_route_is_handed_what_its_declaration_says() -> None:
    app, table = _table()
    handed: list[tuple[Any, Any, Any, Any]] = []

    @table.route(
        "POST",
        "/things/{id}",
        body=Thing,
        answer=Named,
        hot=True,
        path_parameters={"id": Annotated[str, Path(max_length=3)]},
    )
    async def name_thing(core: Any, caller: Any, body: Thing, id: str) -> Any:
        handed.append((core, caller, body, id))
        return {"name": body.name, "called": id}

    app.include_router(table.router)
    served = HotRoutes(app, table.routes, max_bytes=1024)
    assert served.matcher.match("POST", "/things/abc") is not None
    assert served.matcher.match("GET", "/things/abc") is None
    assert _fastapi_route(app, "POST", "/things/abc").name == "name_thing"

    served.state = types.SimpleNamespace(authenticator=_open_authenticator(), coordinator="core")
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"name": "x"}', "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for path in ("/things/abc", "/things/abcd"):
        scope = {"type": "http", "method": "POST", "path": path, "headers": list(_JSON)}
        asyncio.run(served(scope, receive, send))
    ((core, who, body, id),) = handed
    assert core == "core" and who.name == "anonymous" and body == Thing(name="x") and id == "abc"
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert statuses == [200, 422]
    assert json.loads(bodies[0]) == {"name": "x", "called": "abc"}


def test_a_route_whose_path_disagrees_with_its_declaration_is_refused() -> None:
    _, table = _table()

    async def handler(core: Any, caller: Any, body: Thing, n: int) -> Any:
        return body

    for path, parameters, phrase in (
        ("/things/{n:int}", {"n": int}, "typed"),
        ("/things/{n}", {}, "not the path's"),
        ("/things", {"n": str}, "not the path's"),
    ):
        with pytest.raises(TypeError, match=phrase):
            table.route("POST", path, body=Thing, answer=Thing, path_parameters=parameters)(handler)


def test_an_answer_is_its_model_serialised() -> None:
    route = Route("POST", "/things", body=Thing, answer=Named, handler=_nothing)
    response = route.respond(types.SimpleNamespace(name="é", called="x", extra=1))
    assert response.body == b'{"name":"\xc3\xa9","called":"x"}'
    assert response.headers["content-type"] == "application/json"


async def _nothing(*_: Any) -> None:
    return None


# --- the answers, raw off a live server -------------------------------------


def _declared_models(app: FastAPI, method: str, path: str) -> dict[int, type[BaseModel]]:
    route = _fastapi_route(app, method, path)
    declared = {
        int(code): spec["model"]
        for code, spec in route.responses.items()
        if str(code).isdigit() and "model" in spec
    }
    declared[route.status_code or 200] = route.response_model
    return declared


class Answers:
    """Sends requests to a live server and checks each raw answer against the
    model its route declares for that status."""

    def __init__(self, http: httpx.Client, served: HotRoutes) -> None:
        self.http = http
        self.served = served
        self.seen: set[tuple[str, int]] = set()  # (endpoint name, status)

    def post(self, status: int, path: str, payload: object = None, **kwargs: Any) -> Any:
        response = self.http.post(path, json=payload, **kwargs)
        found = self.served.matcher.match("POST", path)
        assert found is not None, f"{path} is not a hot route"
        raw = response.content
        assert response.status_code == status, f"POST {path}: {response.status_code} {raw!r}"
        declared = _declared_models(self.served.app, "POST", path)
        assert status in declared, f"POST {path} answered {status}, which it does not declare"
        assert response.headers["content-type"] == "application/json"
        model = declared[status]
        parsed = model.model_validate_json(raw, strict=True)
        # Nothing beyond the model, nothing coerced: for a success, exactly what
        # FastAPI would have serialized from the response model; an error
        # carries its optional fields only when they apply.
        dumped = parsed.model_dump(mode="json", by_alias=True, exclude_unset=model is ErrorOut)
        assert json.loads(raw) == dumped, f"POST {path} -> {status}: {raw!r}"
        self.seen.add((found[0].name, status))
        return json.loads(raw)


JSON = {"content-type": "application/json"}
_JSON = [(b"content-type", b"application/json")]


def _half(**overrides: object) -> dict[str, object]:
    return {"topic": TOPIC, "producer_group": GROUP, "body_text": "order 1001", **overrides}


def _end(resolution: str, group: str = GROUP) -> dict[str, object]:
    return {"producer_group": group, "resolution": resolution}


def test_hot_answers_are_what_their_routes_declare(
    live_server: LiveServer, served: HotRoutes
) -> None:
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        answers = Answers(http, served)
        post = answers.post

        first = post(201, "/v1/transactions", _half(message_id="contract-1"))
        post(200, "/v1/transactions", _half(message_id="contract-1"))  # the first result
        post(409, "/v1/transactions", _half(message_id="contract-1", body_text="other"))
        post(400, "/v1/transactions", _half(producer_group=None))
        post(422, "/v1/transactions", _half(surprise=1))
        post(422, "/v1/transactions", content=b"\xff not json", headers=JSON)

        batch = post(200, "/v1/transactions/batch", {"messages": [_half(), _half(), _half()]})
        post(400, "/v1/transactions/batch", {"messages": []})
        post(422, "/v1/transactions/batch", {"messages": "no"})
        a, b, c = (result["transaction_id"] for result in batch["results"])

        tx = first["transaction_id"]
        post(200, f"/v1/transactions/{tx}/end", _end("unknown"))
        post(200, f"/v1/transactions/{tx}/end", _end("rollback"))
        post(409, f"/v1/transactions/{tx}/end", _end("commit"))  # with current_state
        post(409, f"/v1/transactions/{tx}/end", _end("commit", group="other"))
        post(404, "/v1/transactions/feedface/end", _end("commit"))
        post(422, f"/v1/transactions/{'t' * 129}/end", _end("commit"))  # path
        post(422, f"/v1/transactions/{tx}/end", _end("maybe"))  # body

        def item(transaction_id: str, resolution: str, group: str = GROUP) -> dict[str, str]:
            return {"transaction_id": transaction_id, **_end(resolution, group)}

        ended = post(
            200,
            "/v1/transactions/end-batch",
            {
                "requests": [
                    item(a, "commit"),
                    item(b, "rollback", group="other"),
                    item(tx, "commit"),
                    item("f" * 32, "commit"),
                ]
            },
        )
        assert [result["ok"] for result in ended["results"]] == [True, False, False, False]
        post(400, "/v1/transactions/end-batch", {"requests": [item(c, "commit")] * 2})
        post(422, "/v1/transactions/end-batch", {"requests": [{"transaction_id": c}]})

        post(201, "/v1/messages", {"topic": TOPIC, "body_text": "n", "message_id": "contract-2"})
        post(200, "/v1/messages", {"topic": TOPIC, "body_text": "n", "message_id": "contract-2"})
        post(400, "/v1/messages", {"topic": "no spaces", "body_text": "n"})
        post(422, "/v1/messages", {"topic": TOPIC})

        post(200, "/v1/messages/batch", {"messages": [{"topic": TOPIC, "body_text": "n"}] * 2})
        post(400, "/v1/messages/batch", {"messages": []})
        post(422, "/v1/messages/batch", {})

    for name in EXPECTED_HOT:
        statuses = {status for endpoint, status in answers.seen if endpoint == name}
        assert min(statuses) < 300 and max(statuses) >= 400, f"{name}: {statuses}"


def test_refusals_are_what_the_hot_routes_declare(database_url: str, served: HotRoutes) -> None:
    settings = Settings(reject_transactional_messages=True, max_request_bytes=1024)
    with (
        LiveServer(database_url, settings) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        answers = Answers(http, served)
        post = answers.post
        post(403, "/v1/transactions", _half())
        post(403, "/v1/transactions/batch", {"messages": [_half()]})
        post(413, "/v1/messages", {"topic": TOPIC, "body_text": "x" * 2000})  # by its length
        chunks = (b'{"topic": "t", "body_text": "' + b"x" * 600, b"x" * 600 + b'"}')
        post(413, "/v1/messages/batch", content=iter(chunks), headers=JSON)  # no length


def test_auth_refusals_are_what_the_hot_routes_declare(
    database_url: str, served: HotRoutes, issue_token: Any
) -> None:
    mine = issue_token("producer", produce_topics=(TOPIC,), producer_groups=(GROUP,))
    theirs = issue_token("stranger", produce_topics=("elsewhere",), producer_groups=("others",))
    with (
        LiveServer(database_url, Settings()) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        answers = Answers(http, served)
        post = answers.post
        as_mine = {"authorization": f"Bearer {mine}"}
        tx = post(201, "/v1/transactions", _half(), headers=as_mine)["transaction_id"]
        for path, payload in _one_request_per_hot_route(tx):
            missing = post(401, path, payload)
            assert "needs a token" in missing["message"]
            wrong = post(401, path, payload, headers={"authorization": "Bearer coord_nope"})
            assert "not valid" in wrong["message"]
            denied = post(403, path, payload, headers={"authorization": f"Bearer {theirs}"})
            assert "token 'stranger' may not" in denied["message"]
            as_text = {**as_mine, "content-type": "text/plain"}
            refused = post(415, path, content=json.dumps(payload).encode(), headers=as_text)
            assert "application/json" in refused["message"]
        post(200, f"/v1/transactions/{tx}/end", _end("commit"), headers=as_mine)

    # One request a token, then no more for a long while.
    limited = Settings(rate_limit_per_second=0.001, rate_limit_burst=1)
    with (
        LiveServer(database_url, limited) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        answers = Answers(http, served)
        answers.post(201, "/v1/messages", {"topic": TOPIC, "body_text": "n"}, headers=as_mine)
        for path, payload in _one_request_per_hot_route(tx):
            slowed = answers.post(429, path, payload, headers=as_mine)
            assert "over its rate" in slowed["message"]


def _one_request_per_hot_route(tx: str) -> list[tuple[str, dict[str, object]]]:
    normal = {"topic": TOPIC, "body_text": "n"}
    return [
        ("/v1/transactions", _half()),
        ("/v1/transactions/batch", {"messages": [_half()]}),
        (f"/v1/transactions/{tx}/end", _end("commit")),
        ("/v1/transactions/end-batch", {"requests": [{"transaction_id": tx, **_end("commit")}]}),
        ("/v1/messages", normal),
        ("/v1/messages/batch", {"messages": [normal]}),
    ]
