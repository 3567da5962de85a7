"""The HTTP door: JSON over HTTP with an OpenAPI document at /docs and /openapi.json."""

from coordinator.http.app import create_app

__all__ = ["create_app"]
