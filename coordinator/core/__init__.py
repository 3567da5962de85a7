"""The transport-free core. HTTP and the CLI call Coordinator; the SDK reaches it over HTTP."""

from coordinator.core.coordinator import Coordinator

__all__ = ["Coordinator"]
