"""Check-back: the producer registry, check rounds, pull and push dispatch, operator actions."""

from coordinator.core.checkback.service import CheckBack

__all__ = ["CheckBack"]
