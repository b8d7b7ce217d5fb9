"""JSON request bodies: authorized before they are read, bounded before they are
validated, parsed and validated off the event loop.

A pydantic body parameter is parsed and validated by FastAPI on the event loop, before
the route's dependencies (the caller's authentication among them) have a say: one
anonymous megabyte of 500,000 invalid items held the server for seconds (pydantic builds
one error object per item).  So no route declares a pydantic body: each takes its body
from a :class:`JsonBody` dependency, which

1. answers 401 before looking at the body when the route needs a token and none was
   sent (a bad token was refused by the request guard, :mod:`zarrchive.api.middleware`);
2. in a worker thread, refuses (400) a body with more JSON tokens than the largest valid
   one of its type has (:func:`token_budget`, from the models and the route's list limit
   ``max_batch_files``), counted lazily so that a hostile body stops the count early:
   the work done for it is bounded by the route's limits, not by the body's size (only
   bodies with free-form metadata, on routes that need a token, have no budget);
3. then parses and validates it there, the request models refusing objects with more keys
   than they have fields and lists longer than theirs unvalidated
   (:class:`zarrchive.api.schemas.RequestModel`), with the same ``400 {"detail":
   "invalid request: ..."}`` as FastAPI's own validation (``api.errors``).

The OpenAPI document describes each body as FastAPI would (:attr:`JsonBody.openapi` is
the route's ``openapi_extra``; :func:`document_bodies` adds the models to its
components).
"""

from __future__ import annotations

import email.message
import functools
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.models import Schema
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import RequestModel
from zarrchive.config import Settings
from zarrchive.errors import BatchTooLarge, InvalidInput
from zarrchive.services.identity.auth import require_user

#: Where the OpenAPI document keeps the models a body refers to.
COMPONENTS = "#/components/schemas/{model}"

#: Every :class:`JsonBody` made (by the routers, at import): their models are documented.
BODIES: list[JsonBody] = []

#: At most this many of pydantic's errors are handed on (``api.errors`` shows 20).
MAX_ERRORS = 20

#: The tokens counted to bound a body before it is parsed: strings (matched whole, with no
#: backtracking), and the characters that open a container or separate two values.  A body
#: has about as many values as tokens, and costs about as much to parse and validate.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[{,]')

#: A body may have this many times the tokens of the largest valid one, plus
#: :data:`TOKEN_SLACK` (room for mistakes that pydantic explains better, e.g. a key twice).
TOKEN_FACTOR = 2
TOKEN_SLACK = 16


def batch_limit(settings: Settings) -> int:
    """The most items a list body of files or paths may have (``max_batch_files``)."""
    return settings.max_batch_files


def _is_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/*+json`` (as FastAPI accepts)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def _tokens(schema: Any, items: int | None) -> int | None:
    """The most :data:`_TOKEN` a valid JSON value of type *schema* has (*items*: the most
    items of a list); ``None`` when unbounded (free-form JSON such as metadata)."""
    if schema in (str, int, float, bool, type(None)):
        return 1
    origin = typing.get_origin(schema)
    if origin in (typing.Union, types.UnionType):
        counts = [_tokens(member, items) for member in typing.get_args(schema)]
        return None if None in counts else max(c for c in counts if c is not None)
    if origin is list and items is not None:
        (item,) = typing.get_args(schema)
        inner = _tokens(item, None)
        return None if inner is None else 1 + items * (1 + inner)
    if isinstance(schema, type) and issubclass(schema, RequestModel):
        total = 1
        for name, field in schema.model_fields.items():
            inner = _tokens(field.annotation, schema.list_limits.get(name))
            if inner is None:
                return None
            total += 2 + inner  # a separator and the key
        return total
    return None


@functools.lru_cache
def token_budget(schema: Any, items: int | None) -> int | None:
    """The most tokens a body of type *schema* may have (*items*: the most items of a list
    body); ``None``: no bound but the body's size."""
    tokens = _tokens(schema, items)
    return None if tokens is None else TOKEN_FACTOR * tokens + TOKEN_SLACK


def _within(raw: bytes, budget: int) -> bool:
    """*raw* has at most *budget* tokens.  Counting the characters that may begin one is
    quick and enough for most bodies; else the tokens are counted lazily: a hostile body
    stops the count early, and the loop lets other threads run between tokens."""
    most = sum(raw.count(c) for c in (b",", b"[", b"{")) + raw.count(b'"') // 2
    if most <= budget:
        return True
    return all(count <= budget for count, _ in enumerate(_TOKEN.finditer(raw), 1))


def _invalid(where: tuple[Any, ...], message: str, kind: str) -> RequestValidationError:
    return RequestValidationError([{"type": kind, "loc": ("body", *where), "msg": message}])


class JsonBody:
    """A route's JSON body of type *schema*, as a FastAPI dependency (see the module).

    *login*: the route needs a token (anonymous callers get their 401 unread);
    *max_items*: for a list body, the most items it may have (by the archive's settings).
    """

    def __init__(
        self,
        schema: Any,
        *,
        login: bool,
        max_items: Callable[[Settings], int] | None = None,
    ) -> None:
        self.schema = schema
        self.login = login
        self.max_items = max_items
        self.adapter: TypeAdapter[Any] = TypeAdapter(schema)
        BODIES.append(self)

    async def __call__(self, request: Request, archive: ArchiveDep, user: UserDep) -> Any:
        if self.login:
            require_user(user)
        raw = await request.body()  # read (and capped) by the request guard already
        limit = self.max_items(archive.settings) if self.max_items is not None else None
        content_type = request.headers.get("content-type")
        return await run_in_threadpool(self.parse, raw, content_type, limit)

    def parse(self, raw: bytes, content_type: str | None, limit: int | None) -> Any:
        """The validated body of *raw* (400 ``RequestValidationError`` otherwise)."""
        if not raw:
            raise _invalid((), "Field required", "missing")
        if not _is_json(content_type):
            raise _invalid((), "send JSON, with Content-Type: application/json", "json_type")
        budget = token_budget(self.schema, limit)
        if budget is not None and not _within(raw, budget):
            if limit is not None:
                raise BatchTooLarge(
                    f"the request body holds more than {limit} items can (or items with more "
                    f"than their fields): at most {limit} are allowed per request: split it"
                )
            raise InvalidInput(
                "the request body holds more values than this request's fields can "
                "(an object with unknown keys, a list too long?)"
            )
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _invalid((exc.pos,), f"JSON decode error: {exc.msg}", "json_invalid") from exc
        except (ValueError, RecursionError) as exc:  # not UTF-8; nested too deeply
            raise _invalid((), f"not a JSON document ({exc})", "json_invalid") from exc
        if limit is not None and isinstance(value, list) and len(value) > limit:
            raise BatchTooLarge(
                f"the request lists {len(value)} items; at most {limit} are allowed per "
                "request: split it"
            )
        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)[:MAX_ERRORS]
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in errors]
            ) from None

    def _schemas(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The body's schema (models as references) and the models' schemas."""
        by_key, definitions = TypeAdapter.json_schemas(
            [("body", "validation", self.adapter)], ref_template=COMPONENTS
        )
        schema = by_key["body", "validation"]
        if schema.get("type") == "array":
            schema = {**schema, "title": "Body"}  # FastAPI's title of a parameter `body`
        return schema, definitions.get("$defs", {})

    @property
    def openapi(self) -> dict[str, Any]:
        """The route's ``openapi_extra``: its request body as FastAPI documents one."""
        schema, _ = self._schemas()
        return {
            "requestBody": {
                "content": {"application/json": {"schema": schema}},
                "required": True,
            }
        }

    @property
    def components(self) -> dict[str, Any]:
        """The schemas of the models the body refers to, by name."""
        return self._schemas()[1]


def document_bodies(app: FastAPI) -> None:
    """Add the models of the routes' :class:`JsonBody` to the app's OpenAPI components
    (FastAPI adds only those of the bodies it parses itself)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()  # cached by FastAPI: this adds to the cached document
        schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
        for body in BODIES:
            for name, schema in body.components.items():
                # as FastAPI writes its document: through its model, without nulls
                schemas[name] = jsonable_encoder(Schema(**schema), by_alias=True, exclude_none=True)
        document["components"]["schemas"] = dict(sorted(schemas.items()))
        return document

    app.openapi = openapi  # type: ignore[method-assign]
