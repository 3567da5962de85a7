"""The classes made of parts (Delivery, the gRPC MessagingService) keep their parts apart.

Each inherits its parts' methods, so its API is what the class says; the
parts share only the dependencies they are given, never a name of their own
that one would silently shadow in another.
"""

from __future__ import annotations

import ast
import inspect

from coordinator.core.delivery import Delivery
from coordinator.grpc.service import MessagingService
from coordinator.grpc.stubs import load
from coordinator.grpc.unsupported import UNSUPPORTED


def _own_names(part: type) -> set[str]:
    """The methods a class defines and the attributes its methods set on self."""
    tree = ast.parse(inspect.getsource(part))
    names = set(vars(part)) - {"__module__", "__qualname__", "__doc__", "__firstlineno__"}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and isinstance(node.ctx, ast.Store)
        ):
            names.add(node.attr)
    return {name for name in names if not name.startswith("__")}


def _shared(composed: type) -> dict[str, list[str]]:
    owners: dict[str, list[str]] = {}
    for part in composed.__mro__[1:]:
        if part is object:
            continue
        for name in _own_names(part):
            owners.setdefault(name, []).append(part.__name__)
    return {name: parts for name, parts in owners.items() if len(parts) > 1}


def test_the_delivery_parts_share_only_the_context() -> None:
    assert set(_shared(Delivery)) == {"_context"}


def test_the_grpc_parts_share_only_their_dependencies() -> None:
    assert set(_shared(MessagingService)) <= {"core", "authenticator", "config", "stubs", "port"}


def test_every_rpc_of_the_protocol_is_a_method_of_the_service_class() -> None:
    stubs = load()
    service = stubs.service.DESCRIPTOR.services_by_name["MessagingService"]
    missing = [
        m.name for m in service.methods if not callable(getattr(MessagingService, m.name, None))
    ]
    assert missing == []
    assert set(UNSUPPORTED) <= {m.name for m in service.methods}
