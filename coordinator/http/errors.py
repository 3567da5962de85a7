"""Core errors and bad requests become 4xx JSON answers: {"error", "message"}."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from coordinator.domain import errors


class UnsupportedMediaType(errors.CoordinatorError):
    """A request body that is not declared JSON.

    Only HTTP has media types, so this error is the HTTP door's own. Refusing
    them matters for more than tidiness: a browser sends a text/plain (or
    untyped) POST to any site without asking it first (no CORS preflight),
    so accepting one would let any web page drive the coordinator.
    """

    code = "unsupported_media_type"


class HostNotAllowed(errors.CoordinatorError):
    """A Host header naming a host this server does not answer (gate.py: DNS rebinding)."""

    code = "host_not_allowed"


class CrossOriginWrite(errors.CoordinatorError):
    """A browser request from another site's page to the API, or one that would change
    something (gate.py)."""

    code = "cross_origin_write"


STATUS_BY_ERROR: dict[type[errors.CoordinatorError], int] = {
    errors.InvalidMessage: 400,
    errors.TransactionalMessagesRejected: 403,
    errors.NotFound: 404,
    errors.StateConflict: 409,
    errors.ProducerGroupMismatch: 409,
    errors.MessageIdConflict: 409,
    errors.ReceiptHandleStale: 409,
    errors.Unauthenticated: 401,
    errors.PermissionDenied: 403,
    errors.RateLimited: 429,
    errors.DatabaseUnavailable: 503,
    UnsupportedMediaType: 415,
    HostNotAllowed: 400,
    CrossOriginWrite: 403,
}


def error_response(status: int, code: str, message: str, **extra: object) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": code, "message": message, **extra})


def describe_validation_errors(items: Sequence[Any]) -> str:
    """One sentence from pydantic's error list: `field: what is wrong; ...`."""
    parts = []
    for item in items:
        where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
        msg = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts) or "the request is not valid"


def core_error_response(error: errors.CoordinatorError) -> JSONResponse:
    status = next((code for kind, code in STATUS_BY_ERROR.items() if isinstance(error, kind)), 400)
    extra: dict[str, object] = {}
    if isinstance(error, errors.StateConflict) and error.current_state:
        extra["current_state"] = error.current_state
    if isinstance(error, errors.InvalidFilterExpression) and error.position is not None:
        extra["position"] = error.position
    response = error_response(status, error.code, error.message, **extra)
    if isinstance(error, errors.DatabaseUnavailable):
        # Postgres restarts take seconds; the pool reconnects within one.
        response.headers["Retry-After"] = "1"
    return response


def validation_error_response(items: Sequence[Any]) -> JSONResponse:
    return error_response(422, "invalid_request", describe_validation_errors(items))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.CoordinatorError)
    async def _core_error(_: Request, error: errors.CoordinatorError) -> JSONResponse:
        return core_error_response(error)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, error: HTTPException) -> JSONResponse:
        # Starlette's own answers (404 for an unknown route, 400 for a body
        # that is not JSON, 405, ...) in the same shape as ours.
        codes = {
            400: "invalid_request",
            404: "not_found",
            405: "method_not_allowed",
            413: "request_too_large",
        }
        response = error_response(
            error.status_code, codes.get(error.status_code, "http_error"), str(error.detail)
        )
        if error.headers:
            response.headers.update(error.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, error: RequestValidationError) -> JSONResponse:
        return validation_error_response(error.errors())
