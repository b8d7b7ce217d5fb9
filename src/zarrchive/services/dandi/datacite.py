"""DataCite's REST API for DOIs (JSON:API, basic auth): the calls the DOI jobs make.

One seam: *transport* (an :class:`httpx.BaseTransport`) for what carries the requests; the
tests talk to a real HTTP stand-in (tests/helpers/datacite_standin.py) through the default one.
A 4xx (but 429) is :class:`~zarrchive.errors.DataCiteRefused` with DataCite's message; no
answer, a timeout, a 5xx or a 429 is :class:`~zarrchive.errors.DataCiteUnavailable` (the job
retries).
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

import httpx

from zarrchive.config import DoiSettings
from zarrchive.db.models import DoiState
from zarrchive.errors import DataCiteRefused, DataCiteUnavailable
from zarrchive.services.dandi.doi_metadata import (
    ERROR_LIMIT,
    JSONAPI,
    datacite_errors,
    document,
    state_from_datacite,
)

log = logging.getLogger(__name__)

#: (connect, read/write/pool) seconds: a DOI job never holds its thread long
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: The most of an answer the client reads.
MAX_ANSWER = 1024 * 1024


class DataCiteClient:
    """Calls to ``{api_url}/dois`` as the repository account of *settings*."""

    def __init__(self, settings: DoiSettings, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        self._client = httpx.Client(
            base_url=settings.api_url,
            auth=httpx.BasicAuth(settings.user, settings.password),
            headers={"Accept": JSONAPI, "Content-Type": JSONAPI},
            timeout=TIMEOUT,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> DataCiteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _path(doi: str) -> str:
        return "/dois/" + urllib.parse.quote(doi, safe="/")

    def _call(
        self, method: str, path: str, doi: str, body: dict[str, Any] | None
    ) -> httpx.Response:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise DataCiteUnavailable(
                f"DataCite ({self.settings.api_url}) did not answer {method} for DOI {doi}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 500 or response.status_code == 429:
            raise DataCiteUnavailable(
                f"DataCite answered {response.status_code} to {method} for DOI {doi}: "
                f"{_message(response)}"
            )
        return response

    def _refused(self, response: httpx.Response, method: str, doi: str) -> DataCiteRefused:
        return DataCiteRefused(
            f"DataCite refused {method} of DOI {doi} ({response.status_code}): "
            f"{_message(response)}",
            status=response.status_code,
        )

    def get_state(self, doi: str) -> DoiState | None:
        """The DOI's state at DataCite; ``None`` if it has no such DOI."""
        response = self._call("GET", self._path(doi), doi, None)
        if response.status_code == 404:
            return None
        if not response.is_success:
            raise self._refused(response, "GET", doi)
        return _state(response, doi)

    def create(self, doi: str, attributes: dict[str, Any]) -> DoiState:
        """``POST /dois``; if DataCite has the DOI already (a retried job whose answer was
        lost: 422 "already taken"), ``PUT`` instead.  Never a second DOI: the DOI is named."""
        response = self._call("POST", "/dois", doi, document(doi, attributes))
        if response.status_code == 422 and "taken" in _message(response).lower():
            log.info("DOI %s exists at DataCite already: updating it", doi)
            return self.update(doi, attributes)
        if not response.is_success:
            raise self._refused(response, "POST", doi)
        return _state(response, doi)

    def update(self, doi: str, attributes: dict[str, Any]) -> DoiState:
        """``PUT /dois/{doi}``: its metadata and event."""
        response = self._call("PUT", self._path(doi), doi, document(doi, attributes))
        if not response.is_success:
            raise self._refused(response, "PUT", doi)
        return _state(response, doi)

    def delete(self, doi: str) -> None:
        """``DELETE /dois/{doi}`` (a Draft DOI); one DataCite has not is deleted already."""
        response = self._call("DELETE", self._path(doi), doi, None)
        if response.status_code == 404 or response.is_success:
            return
        raise self._refused(response, "DELETE", doi)


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    found = datacite_errors(body)
    if found is not None:
        return found
    return response.text[:ERROR_LIMIT] or response.reason_phrase


def _state(response: httpx.Response, doi: str) -> DoiState:
    try:
        body = response.json()
        value = body["data"]["attributes"]["state"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataCiteUnavailable(
            f"DataCite's answer for DOI {doi} is not a DOI document: {response.text[:200]!r}"
        ) from exc
    state = state_from_datacite(value)
    if state is None:
        raise DataCiteUnavailable(f"DataCite answered an unknown state {value!r} for DOI {doi}")
    return state
