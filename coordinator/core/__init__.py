"""The transport-free core. HTTP, gRPC, the CLI and the SDK all call Coordinator."""

from coordinator.core.coordinator import Coordinator

__all__ = ["Coordinator"]
