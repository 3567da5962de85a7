"""What the OpenAPI document says of the answers and of the names a request carries.

The error answers: every operation lists the error statuses it can give,
all with the one error body. The names: every name, id, tag, key and handle
is documented with the pattern and bounds of the rule in domain/rules.py
that the core holds it to, and for any string the document and the rule
agree (JSON Schema's own semantics, through jsonschema_rs, as schemathesis
validates).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.config import Settings
from coordinator.domain import rules
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.messages import NewMessage
from coordinator.http import create_app
from coordinator.http.fields import BASE64_PATTERN
from tests.configs import configs

SPEC = create_app(configs().http).app.openapi()
ERROR_REF = "#/components/schemas/ErrorOut"

# Names of the fields and parameters that carry names and ids, wherever they are.
NAMED = {
    "topic",
    "producer_group",
    "consumer_group",
    "message_id",
    "transaction_id",
    "instance_id",
    "tags",
    "keys",
    "message_group",
    "receipt_handle",
    "receipt_handles",
}


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in SPEC["paths"].items():
        for method, operation in methods.items():
            yield method.upper(), path, operation


OPERATIONS = list(_operations())


def _ids(operations: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    return [f"{method} {path}" for method, path, _ in operations]


def test_metrics_are_declared_as_prometheus_text_not_json() -> None:
    answers = SPEC["paths"]["/metrics"]["get"]["responses"]
    content_types = set(answers["200"]["content"])
    assert content_types and all(kind.startswith("text/plain") for kind in content_types)
    assert {"401", "403", "429", "503"} <= answers.keys()
    assert answers["401"]["content"].keys() == {"application/json"}


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS, ids=_ids(OPERATIONS))
def test_every_error_answer_is_the_one_error_body(
    method: str, path: str, operation: dict[str, Any]
) -> None:
    errors = {code: r for code, r in operation["responses"].items() if code >= "400"}
    assert errors
    for code, response in errors.items():
        assert response["content"].keys() == {"application/json"}, (code, response)
        schema = response["content"]["application/json"]["schema"]
        refs = [schema] if "$ref" in schema else schema.get("anyOf", [])
        assert {"$ref": ERROR_REF} in refs, (code, schema)
        assert response["description"], code


def test_the_error_body_has_an_optional_current_state_string() -> None:
    error = SPEC["components"]["schemas"]["ErrorOut"]
    assert error["required"] == ["error", "message"]
    assert error["properties"]["current_state"]["type"] == "string"


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS, ids=_ids(OPERATIONS))
def test_every_operation_lists_the_errors_it_can_give(
    method: str, path: str, operation: dict[str, Any]
) -> None:
    statuses = {int(code) for code in operation["responses"] if code >= "400"}
    # Any request: too slow to arrive, a declared body over max_request_bytes,
    # too many connections; and every route reads or writes PostgreSQL.
    expected = {408, 413, 429, 503}
    if operation.get("security"):
        expected |= {401, 403}
    if "requestBody" in operation:
        expected |= {400, 415, 422}
    parameters = operation.get("parameters", [])
    if parameters:
        expected.add(422)
    if any("string" in str(p["schema"]) for p in parameters):
        expected.add(400)  # names and ids, which the core's rules check
    assert expected <= statuses
    # Nothing FastAPI would add of its own shape (HTTPValidationError).
    assert "HTTPValidationError" not in str(operation["responses"])


def test_route_specific_errors_are_listed() -> None:
    paths = SPEC["paths"]
    end = paths["/v1/transactions/{transaction_id}/end"]["post"]["responses"]
    assert {"404", "409"} <= end.keys() and "current_state" in end["409"]["description"]
    assert (
        "transactional_messages_rejected"
        in (paths["/v1/transactions"]["post"]["responses"]["403"]["description"])
    )
    ack = paths["/v1/consumer-groups/{consumer_group}/ack"]["post"]["responses"]
    assert "receipt_handle_stale" in ack["409"]["description"]
    health = paths["/health"]["get"]["responses"]
    assert "401" not in health and "503" in health


def test_no_operation_lists_an_error_it_cannot_give() -> None:
    paths = SPEC["paths"]
    # No token: no 401, and a GET is no write (no cross-origin 403). No input: no 415 or 422.
    # (Any request may get 400: two Authorization headers, a Host not answered.)
    assert {"401", "403", "415", "422"}.isdisjoint(paths["/health"]["get"]["responses"])
    assert {"415", "422"}.isdisjoint(paths["/v1/status"]["get"]["responses"])
    # A write may come from another site's page: 403 even without a permission of its own.
    assert "403" in paths["/v1/transactions"]["post"]["responses"]
    # A GET carries no body to refuse as not JSON.
    assert "415" not in paths["/v1/consumer-groups/{consumer_group}/lag"]["get"]["responses"]


# --- names and ids: the documented schema against the rule -------------------


def _string_branch(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a present value is held to: without the `null` of an optional field."""
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    assert len(branches) == 1, schema
    return branches[0]


def _documented_fields() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, name, schema) of every named parameter and body property."""
    for method, path, operation in OPERATIONS:
        for parameter in operation.get("parameters", []):
            if parameter["name"] in NAMED:
                where = f"{method} {path} {parameter['in']}"
                yield where, parameter["name"], _string_branch(parameter["schema"])
    for model, schema in SPEC["components"]["schemas"].items():
        if not model.endswith("In"):
            continue  # responses carry what was stored
        for name, field in schema.get("properties", {}).items():
            if name in NAMED:
                yield model, name, _string_branch(field)


FIELDS = list(_documented_fields())


def _distinct(fields: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict]]:
    """Each documented (name, schema) once: a consumer group is alike on every route."""
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for where, name, schema in fields:
        found.setdefault(name + json.dumps(schema, sort_keys=True), (where, name, schema))
    return list(found.values())


DISTINCT = _distinct(FIELDS)


def _message_group(value: str) -> None:
    message = NewMessage(topic="orders", body=b"x", message_group=value)
    rules.check_new_message(message, Settings(database_url=None), transactional=False)


# The rule each named field is held to: it raises InvalidMessage to refuse.
RULES: dict[str, Callable[[str], object]] = {
    "topic": rules.check_topic,
    "producer_group": lambda value: rules.check_name("producer group", value),
    "consumer_group": rules.check_consumer_group,
    "message_id": rules.check_message_id,
    "transaction_id": rules.check_message_id,
    "instance_id": lambda value: rules.check_instance("order-svc", value),
    "tags": rules.check_tags,
    "keys": lambda value: rules.check_keys((value,)),
    "message_group": _message_group,
    "receipt_handle": rules.delivery_id_of,
    "receipt_handles": rules.delivery_id_of,
}

# Strings at the edges of the rules, tried for every field besides the drawn ones.
EDGES = [
    "",
    " ",
    "orders",
    "orders\n",
    "\norders",
    "or ders",
    "a|b",
    "a||b",
    "%|_-",
    "\x00",
    "x\x00",
    "\u3000",
    " \u3000tag ",
    "x" * 127,
    "x" * 128,
    "x" * 129,
    "x" * 255,
    "x" * 256,
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "rmq_sys_x",
    "TBW102",
    "TBW1020",
    "SCHEDULE_TOPIC_XXXX",
    "10.0.0.7@4242",
    "order-1001",
    "a.b:c",
    "1." + "0" * 32,
    "0." + "0" * 32,
    "9" * 18 + "." + "f" * 32,
    "9" * 19 + "." + "f" * 32,
    "12.ABCDEF" + "0" * 26,
    "😀",
]


def _items(schema: dict[str, Any]) -> dict[str, Any]:
    return schema["items"] if schema.get("type") == "array" else schema


def _accepted(rule: Callable[[str], object], value: str) -> bool:
    try:
        rule(value)
    except InvalidMessage:
        return False
    return True


def test_every_named_field_is_documented_with_its_rule() -> None:
    assert {name for _, name, _ in FIELDS} == NAMED
    for where, name, schema in FIELDS:
        item = _items(schema)
        assert item.get("pattern") and item.get("minLength") == 1, (where, name, schema)
        assert name in RULES


@pytest.mark.parametrize(
    ("where", "name", "schema"), DISTINCT, ids=[f"{name} ({where})" for where, name, _ in DISTINCT]
)
def test_the_documented_pattern_and_the_rule_agree(
    where: str, name: str, schema: dict[str, Any]
) -> None:
    item = _items(schema)
    valid = jsonschema_rs.validator_for(item).is_valid
    rule = RULES[name]
    for value in EDGES:
        assert valid(value) == _accepted(rule, value), (where, value)

    # Strings the pattern describes (within the documented length), and any strings.
    documented = st.from_regex(item["pattern"], fullmatch=True).filter(
        lambda value: len(value) <= item.get("maxLength", sys.maxsize)
    )

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(st.one_of(documented, st.text(max_size=300)))
    def agree(value: str) -> None:
        assert valid(value) == _accepted(rule, value), (where, value)

    agree()


def test_arrays_of_names_state_their_bounds() -> None:
    message = SPEC["components"]["schemas"]["MessageIn"]["properties"]
    assert _string_branch(message["keys"])["maxItems"] == rules.MAX_KEYS
    handles = SPEC["components"]["schemas"]["AckBatchIn"]["properties"]["receipt_handles"]
    assert (handles["minItems"], handles["maxItems"]) == (1, rules.MAX_ACK_BATCH)


def test_the_whitespace_class_is_what_isspace_calls_whitespace() -> None:
    spaces = re.compile(f"[{rules.WHITESPACE_CLASS}]")
    for code in range(sys.maxunicode + 1):
        character = chr(code)
        assert bool(spaces.fullmatch(character)) == character.isspace(), hex(code)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.one_of(
        st.binary(max_size=20).map(lambda raw: base64.b64encode(raw).decode()),
        st.text(alphabet="AB+/=\n =-_", max_size=12),
    )
)
def test_the_base64_pattern_is_what_the_body_decoder_accepts(text: str) -> None:
    try:
        base64.b64decode(text, validate=True)
        decodes = True
    except (binascii.Error, ValueError):
        decodes = False
    assert jsonschema_rs.validator_for({"pattern": BASE64_PATTERN}).is_valid(text) == decodes
