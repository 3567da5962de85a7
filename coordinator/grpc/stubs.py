"""The generated RocketMQ v2 protocol modules, imported once and only when gRPC is on.

They ship with the PyPI client `rocketmq-python-client` (no copy of the
.proto files here: two modules generated from the same protos cannot live in
one process). Importing them loads the client package too, which creates
`~/logs/rocketmq_python/`; that is why nothing imports this module unless
the gRPC door is on.
"""

from __future__ import annotations

import functools
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
        from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
            definition_pb2,
            service_pb2,
            service_pb2_grpc,
        )
    except ImportError as error:
        raise StubsMissing(
            f"the RocketMQ gRPC door needs rocketmq-python-client ({error}); {INSTALL_HINT}"
        ) from None
    return Stubs(definition_pb2, service_pb2, service_pb2_grpc)
