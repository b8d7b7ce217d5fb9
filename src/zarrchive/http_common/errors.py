"""The one place where the exception tree becomes HTTP responses.

Every error answers ``{"detail": ...}``: a message, or for some errors an
object with a message and structured data (e.g. each file that failed
verification).  Request validation errors (malformed JSON, wrong types) are
400s like every other bad input.
"""

from __future__ import annotations

import logging

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from zarrchive import errors

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying a 503.
RETRY_AFTER_SECONDS = 5

#: Most specific class first.
STATUS_CODES: list[tuple[type[errors.ZarrchiveError], int]] = [
    (errors.RequestTooLarge, 413),
    (errors.InvalidInput, 400),
    (errors.AuthenticationRequired, 401),
    (errors.PermissionDenied, 403),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.StorageUnavailable, 503),
    (errors.ArchiveBusy, 503),
    (errors.DatabaseUnavailable, 503),
    (errors.StorageError, 502),
    (errors.IdentityProviderUnavailable, 502),
    (errors.CorruptChecksumNode, 500),
    (errors.CorruptManifest, 500),
    (errors.ConfigurationError, 500),
]


def status_code_for(exc: errors.ZarrchiveError) -> int:
    for cls, status in STATUS_CODES:
        if isinstance(exc, cls):
            return status
    return 500


def _format_location(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


#: What the database driver raises when the server is gone, restarting or dropped the
#: connection: it will pass.
DATABASE_DOWN = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


def database_unavailable(exc: Exception) -> errors.DatabaseUnavailable:
    return errors.DatabaseUnavailable(
        f"the database is unavailable ({type(exc).__name__}): the request did not complete; "
        "retry in a few seconds"
    )


def error_response(exc: errors.ZarrchiveError) -> JSONResponse:
    """The HTTP response of an error of the tree (also used by the request guard)."""
    status = status_code_for(exc)
    if status >= 500:
        log.error("%s: %s", type(exc).__name__, exc.message)
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": "token"}
    elif status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return JSONResponse({"detail": exc.detail}, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.ZarrchiveError)
    async def _zarrchive_error(_request: Request, exc: errors.ZarrchiveError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        messages = []
        for error in exc.errors()[:20]:
            where = _format_location(tuple(error.get("loc", ())))
            messages.append(f"{where}: {error.get('msg', 'invalid')}")
        return JSONResponse({"detail": "invalid request: " + "; ".join(messages)}, status_code=400)

    @app.exception_handler(sqlalchemy.exc.OperationalError)
    @app.exception_handler(sqlalchemy.exc.InterfaceError)
    async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
        return error_response(database_unavailable(exc))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", exc_info=exc)
        return JSONResponse(
            {"detail": "internal error; the operation may be retried (see the server log)"},
            status_code=500,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
