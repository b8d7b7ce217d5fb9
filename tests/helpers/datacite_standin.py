"""A DataCite-compatible stand-in: a real HTTP server (Starlette under uvicorn, in a thread, on
127.0.0.1) that enforces what DataCite's REST API enforces for DOIs.

DataCite's service can't run here; the tests of :mod:`zarrchive.services.dandi.dois` talk to this
over HTTP (never a mock of HTTP).  What it enforces, as DataCite does:

- JSON:API: ``Content-Type: application/vnd.api+json``, a document ``{"data": {"type":
  "dois", "attributes": {...}}}``; answers are documents too, errors ``{"errors":
  [{"status", "source", "title"}]}``;
- HTTP basic auth of the repository account (401), the DOI in the repository's prefix (403);
- the payload validated against DataCite's metadata schema 4.5 as JSON Schema
  (``datacite_schema/datacite-v4.5.json``, vendored): a Draft DOI with the properties it
  gives (DataCite keeps a Draft with its DOI alone), a Registered or Findable one with every
  required property and a ``url``; an invalid payload is a 422;
- the states: Draft -> Registered (``register``) -> Findable (``publish``), Findable ->
  Registered (``hide``); a Registered or Findable DOI is never deleted (405) nor made Draft;
- ``POST /dois`` of a DOI it has: 422 "This DOI has already been taken"; ``PUT /dois/{doi}``
  of one it has not: created (DataCite's upsert); an unknown DOI: 404.

``stop()`` and ``start()`` take it down and up again on the same port (an outage).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from jsonschema import Draft201909Validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SCHEMA_FILE = Path(__file__).parent / "datacite_schema" / "datacite-v4.5.json"
JSONAPI = "application/vnd.api+json"
#: The states DataCite allows for each event, and where it leads.
TRANSITIONS = {
    "publish": ({"draft", "registered", "findable"}, "findable"),
    "register": ({"draft", "registered"}, "registered"),
    "hide": ({"findable", "registered"}, "registered"),
}


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return schema


def _draft_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A Draft DOI's rules: the properties it gives are checked, none is required."""
    relaxed = dict(schema)
    relaxed.pop("required", None)
    return relaxed


def _errors(status: int, *items: tuple[str | None, str]) -> JSONResponse:
    errors = []
    for source, title in items:
        error: dict[str, str] = {"status": str(status), "title": title}
        if source is not None:
            error["source"] = source
        errors.append(error)
    return JSONResponse({"errors": errors}, status_code=status, media_type=JSONAPI)


@dataclass
class StoredDoi:
    doi: str
    state: str
    attributes: dict[str, Any] = field(default_factory=dict)


class DataCiteStandIn:
    """The stand-in's state (DOIs, calls) and its server."""

    def __init__(self, *, prefix: str = "10.80507", user: str = "REPO.ID", password: str = "pw"):
        self.prefix, self.user, self.password = prefix, user, password
        self.dois: dict[str, StoredDoi] = {}
        #: (method, path, status) of every request, in order
        self.calls: list[tuple[str, str, int]] = []
        #: DOI -> how many requests created it (a second: a DOI made twice)
        self.creations: dict[str, int] = {}
        self.lock = threading.Lock()
        schema = _schema()
        Draft201909Validator.check_schema(schema)
        self.full = Draft201909Validator(schema)
        self.draft = Draft201909Validator(_draft_schema(schema))
        self.port = _free_port()
        self.app = Starlette(
            routes=[
                Route("/dois", self._post, methods=["POST"]),
                Route("/dois/{doi:path}", self._one, methods=["GET", "PUT", "DELETE"]),
            ]
        )
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the server ------------------------------------------------------------------------
    def start(self) -> None:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the DataCite stand-in did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)
            self._server = self._thread = None

    # -- what tests read --------------------------------------------------------------------
    def state(self, doi: str) -> str | None:
        with self.lock:
            stored = self.dois.get(doi)
            return None if stored is None else stored.state

    def attributes(self, doi: str) -> dict[str, Any]:
        with self.lock:
            return json.loads(json.dumps(self.dois[doi].attributes))  # type: ignore[no-any-return]

    def created(self, doi: str) -> int:
        """How many requests created *doi* (POST or PUT answered 201)."""
        with self.lock:
            return self.creations.get(doi, 0)

    # -- the API ----------------------------------------------------------------------------
    def _authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return False
        return (user, password) == (self.user, self.password)

    async def _document(self, request: Request) -> dict[str, Any] | JSONResponse:
        media = request.headers.get("content-type", "").split(";")[0].strip()
        if media not in (JSONAPI, "application/json"):
            return _errors(415, (None, f"The content type is not recognized: {media!r}"))
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _errors(400, (None, "The request body is not JSON"))
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or data.get("type") != "dois":
            return _errors(400, ("data", "A JSON:API document of type 'dois' is required"))
        attributes = data.get("attributes")
        if not isinstance(attributes, dict):
            return _errors(400, ("data/attributes", "attributes must be an object"))
        return data

    def _record(self, request: Request, response: Response) -> Response:
        with self.lock:
            self.calls.append((request.method, request.url.path, response.status_code))
        return response

    async def _post(self, request: Request) -> Response:
        return self._record(request, await self._write(request, None))

    async def _one(self, request: Request) -> Response:
        doi = request.path_params["doi"].lower()
        if not self._authorized(request):
            response: Response = _errors(401, (None, "Bad credentials."))
        elif request.method == "GET":
            response = self._get(doi)
        elif request.method == "DELETE":
            response = self._delete(doi)
        else:
            response = await self._write(request, doi)
        return self._record(request, response)

    def _get(self, doi: str) -> Response:
        with self.lock:
            stored = self.dois.get(doi)
            if stored is None:
                return _errors(404, (None, "The resource you are looking for doesn't exist."))
            return self._answer(stored, 200)

    def _delete(self, doi: str) -> Response:
        with self.lock:
            stored = self.dois.get(doi)
            if stored is None:
                return _errors(404, (None, "The resource you are looking for doesn't exist."))
            if stored.state != "draft":
                return _errors(405, (None, "Method not allowed"))
            del self.dois[doi]
        return Response(status_code=204)

    async def _write(self, request: Request, path_doi: str | None) -> Response:
        if not self._authorized(request):
            return _errors(401, (None, "Bad credentials."))
        data = await self._document(request)
        if isinstance(data, JSONResponse):
            return data
        attributes = dict(data["attributes"])
        named = attributes.get("doi") or data.get("id") or path_doi
        if not isinstance(named, str) or not named:
            return _errors(422, ("doi", "Can't be blank"))
        doi = named.lower()
        if path_doi is not None and doi != path_doi:
            return _errors(422, ("doi", "The DOI of the document is not the DOI of the URL"))
        if doi.split("/", 1)[0] != self.prefix:
            return _errors(403, (None, "You are not authorized to access this resource."))
        event = attributes.pop("event", None)
        with self.lock:
            stored = self.dois.get(doi)
            if path_doi is None and stored is not None:
                return _errors(422, ("doi", "This DOI has already been taken"))
            state = "draft" if stored is None else stored.state
            if event is not None:
                if event not in TRANSITIONS:
                    return _errors(
                        422, ("event", f"Event {event!r} is not one of {list(TRANSITIONS)}")
                    )
                allowed, target = TRANSITIONS[event]
                if state not in allowed:
                    return _errors(422, ("event", f"Cannot transition from {state} via {event}"))
                state = target
            merged = {**(stored.attributes if stored is not None else {}), **attributes}
            merged["doi"] = doi
            problems = self._validate(merged, state)
            if problems:
                return _errors(422, *problems)
            created = stored is None
            if created:
                self.creations[doi] = self.creations.get(doi, 0) + 1
            stored = self.dois[doi] = StoredDoi(doi, state, merged)
            return self._answer(stored, 201 if created else 200)

    def _validate(self, attributes: dict[str, Any], state: str) -> list[tuple[str | None, str]]:
        validator = self.draft if state == "draft" else self.full
        problems: list[tuple[str | None, str]] = [
            ("/".join(str(p) for p in error.absolute_path) or None, error.message)
            for error in sorted(validator.iter_errors(attributes), key=str)[:10]
        ]
        if state != "draft" and not attributes.get("url"):
            problems.append(("url", "Can't be blank"))
        return problems

    def _answer(self, stored: StoredDoi, status: int) -> JSONResponse:
        attributes = {**stored.attributes, "state": stored.state}
        body = {"data": {"id": stored.doi, "type": "dois", "attributes": attributes}}
        return JSONResponse(body, status_code=status, media_type=JSONAPI)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
