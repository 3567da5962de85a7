"""The generated RocketMQ v2 protocol modules, imported once and only when gRPC is on.

They ship with the PyPI client `rocketmq-python-client` (no copy of the
.proto files here: two modules generated from the same protos cannot live in
one process). Nothing imports this module unless the gRPC door is on, and it
loads only the protocol modules, not the client around them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

INSTALL_HINT = "install the grpc extra: pip install 'coordinator[grpc]'"


class StubsMissing(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Stubs:
    definition: ModuleType  # messages and enums shared by requests (Message, Code, ...)
    service: ModuleType  # requests and responses
    service_grpc: ModuleType  # add_MessagingServiceServicer_to_server

    def code(self, name: str) -> int:
        """The number of a RocketMQ status code by its name (OK, BAD_REQUEST, ...)."""
        return int(self.definition.Code.Value(name))


@functools.cache
def load() -> Stubs:
    try:
        with _package_without_client():
            from rocketmq.grpc_protocol import (
                definition_pb2,
                service_pb2,
                service_pb2_grpc,
            )
    except ImportError as error:
        raise StubsMissing(
            f"the RocketMQ gRPC door needs rocketmq-python-client ({error}); {INSTALL_HINT}"
        ) from None
    return Stubs(definition_pb2, service_pb2, service_pb2_grpc)


@contextlib.contextmanager
def _package_without_client() -> Iterator[None]:
    """Import `rocketmq.grpc_protocol` without running `rocketmq/__init__.py`.

    That file imports the whole client, which starts OpenTelemetry and
    creates ~/logs/rocketmq_python/ for a log the server never writes. The
    package stands in as a bare module while its protocol modules load, and
    leaves sys.modules afterwards: a later `import rocketmq` (a client in the
    same process) runs the real one, which finds these same protocol modules
    already loaded, so no descriptor is defined twice.
    """
    if "rocketmq" in sys.modules:
        yield
        return
    spec = importlib.util.find_spec("rocketmq")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("No module named 'rocketmq'")
    bare = types.ModuleType("rocketmq")
    bare.__path__ = list(spec.submodule_search_locations)
    sys.modules["rocketmq"] = bare
    try:
        yield
    finally:
        del sys.modules["rocketmq"]
