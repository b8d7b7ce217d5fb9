"""DOIs as DANDI mints them, without I/O: their names, the call that moves a DOI from where it
is at DataCite to where the archive wants it, and the JSON:API documents of those calls.

- names: ``{prefix}/{instance}.{identifier}`` for a dandiset (its "concept" DOI),
  ``{prefix}/{instance}.{identifier}/{version}`` for a published version (DANDI's
  ``format_doi``; the instance name lower-cased);
- DataCite's states: Draft (deletable, not resolvable), Registered (resolvable, hidden),
  Findable; events ``publish`` (Draft/Registered -> Findable), ``hide`` (Findable ->
  Registered); a Registered or Findable DOI is never deleted nor made Draft again;
- the attributes come from ``dandischema.datacite.to_datacite``; a version's DOI names its
  dandiset's (``IsVersionOf``), the dandiset's names each version's (``HasVersion``).

The archive's side (:mod:`zarrchive.services.dandi.dois`) reads the database and calls DataCite.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from zarrchive.db.models import DoiGoal, DoiState

#: DataCite's media type of JSON:API documents.
JSONAPI = "application/vnd.api+json"

_PREFIX = re.compile(r"10\.[0-9]{4,9}")
_IDENTIFIER = re.compile(r"[0-9]{6}")
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_INSTANCE = re.compile(r"[A-Za-z][-A-Za-z]*")


def dandiset_doi(prefix: str, instance: str, identifier: str) -> str:
    """The DOI of a dandiset as a whole: ``10.80507/dandi.000123``."""
    if not _PREFIX.fullmatch(prefix) or not _INSTANCE.fullmatch(instance):
        raise ValueError(f"not a DOI prefix and instance name: {prefix!r}, {instance!r}")
    if not _IDENTIFIER.fullmatch(identifier):
        raise ValueError(f"not a dandiset identifier: {identifier!r}")
    return f"{prefix}/{instance.lower()}.{identifier}"


def version_doi(prefix: str, instance: str, identifier: str, version: str) -> str:
    """The DOI of a published version: ``10.80507/dandi.000123/0.230101.1200``."""
    if not _VERSION.fullmatch(version):
        raise ValueError(f"not a published version: {version!r}")
    return f"{dandiset_doi(prefix, instance, identifier)}/{version}"


class DoiMethod(StrEnum):
    """The HTTP call of a step."""

    #: ``POST /dois``: a DOI DataCite may not have yet (a 422 "already taken": ``PUT``)
    CREATE = "POST"
    #: ``PUT /dois/{doi}``: its metadata, and an event
    UPDATE = "PUT"
    #: ``DELETE /dois/{doi}``: a Draft DOI only
    DELETE = "DELETE"


class DoiEvent(StrEnum):
    """DataCite's events (the attribute ``event``)."""

    PUBLISH = "publish"
    HIDE = "hide"


@dataclass(frozen=True)
class DoiStep:
    """One call to DataCite, and the DOI's state when it succeeds."""

    method: DoiMethod
    event: DoiEvent | None
    #: where the DOI is once DataCite accepted the call
    then: DoiState
    #: send the metadata (a hide or a delete sends none)
    with_metadata: bool = True


def next_step(state: DoiState, goal: DoiGoal, *, publish: bool) -> DoiStep | None:
    """The call that brings a DOI at *state* to *goal* (``None``: it is there).

    With *publish* false (``ZARRCHIVE_DOI_PUBLISH``) a Findable goal stays a Draft DOI.  A DOI
    already Registered or Findable stays so (DataCite never makes one Draft again): its
    metadata is sent again.  Sending the metadata again of a DOI at its goal is
    :func:`resend_step`.
    """
    if goal is DoiGoal.GONE:
        if state in (DoiState.PENDING, DoiState.DRAFT):
            # pending: it may exist (a call whose answer was lost); a 404 says it does not
            return DoiStep(DoiMethod.DELETE, None, DoiState.DELETED, with_metadata=False)
        if state is DoiState.FINDABLE:
            return DoiStep(DoiMethod.UPDATE, DoiEvent.HIDE, DoiState.REGISTERED, False)
        return None
    if state is DoiState.DELETED:
        return None  # its dandiset is gone: nothing brings it back
    findable = goal is DoiGoal.FINDABLE and publish
    if state is DoiState.PENDING:
        if findable:
            return DoiStep(DoiMethod.CREATE, DoiEvent.PUBLISH, DoiState.FINDABLE)
        return DoiStep(DoiMethod.CREATE, None, DoiState.DRAFT)
    if findable and state in (DoiState.DRAFT, DoiState.REGISTERED):
        return DoiStep(DoiMethod.UPDATE, DoiEvent.PUBLISH, DoiState.FINDABLE)
    return None


def resend_step(state: DoiState, goal: DoiGoal, *, publish: bool) -> DoiStep | None:
    """:func:`next_step`, or the metadata sent again to a DOI at its goal (``admin doi sync``,
    a new publication); ``None`` for a DOI that is gone."""
    step = next_step(state, goal, publish=publish)
    if step is not None or goal is DoiGoal.GONE or state is DoiState.DELETED:
        return step
    return DoiStep(DoiMethod.UPDATE, None, state)


def state_from_datacite(value: object) -> DoiState | None:
    """The state DataCite answers (``draft``, ``registered``, ``findable``), or ``None``."""
    try:
        state = DoiState(str(value))
    except ValueError:
        return None
    return None if state in (DoiState.PENDING, DoiState.DELETED) else state


# -- the documents --------------------------------------------------------------------------
def _related(doi: str, relation: str) -> dict[str, str]:
    return {"relatedIdentifier": doi, "relatedIdentifierType": "DOI", "relationType": relation}


def _with_relations(attributes: dict[str, Any], related: list[dict[str, str]]) -> None:
    kept = [
        r
        for r in attributes.get("relatedIdentifiers") or []
        if r not in related  # never twice (uniqueItems)
    ]
    if kept or related:
        attributes["relatedIdentifiers"] = kept + related


#: Keys ``to_datacite`` writes in creators and contributors that DataCite's kernel 4 has not
#: (``creatorName`` was kernel 3's; ``schemeUri`` belongs in ``nameIdentifiers``).
_NOT_KERNEL_4 = ("creatorName", "contributorName", "schemeUri")


def _kernel_4(attributes: dict[str, Any]) -> None:
    for key in ("creators", "contributors"):
        for person in attributes.get(key) or []:
            if isinstance(person, dict):
                for name in _NOT_KERNEL_4:
                    person.pop(name, None)


def version_attributes(
    datacite: dict[str, Any], *, doi: str, dandiset_doi: str, event: DoiEvent | None
) -> dict[str, Any]:
    """The attributes of a version's DOI from ``to_datacite`` of its published metadata
    (*datacite*: ``{"data": {"attributes": ...}}``): its DOI, ``IsVersionOf`` its dandiset's,
    the event."""
    attributes: dict[str, Any] = copy.deepcopy(datacite["data"]["attributes"])
    attributes.pop("event", None)
    _kernel_4(attributes)
    attributes["doi"] = doi
    _with_relations(attributes, [_related(dandiset_doi, "IsVersionOf")])
    if event is not None:
        attributes["event"] = event.value
    return attributes


def dandiset_attributes(
    datacite: dict[str, Any],
    *,
    doi: str,
    url: str,
    version_dois: list[str],
    event: DoiEvent | None,
) -> dict[str, Any]:
    """The attributes of a dandiset's DOI from ``to_datacite`` of its latest metadata (its
    latest version's, or its draft's as it would be published): its DOI and *url* (the
    dandiset's page, not a version's), no version, ``HasVersion`` each of *version_dois*."""
    attributes: dict[str, Any] = copy.deepcopy(datacite["data"]["attributes"])
    attributes.pop("event", None)
    attributes.pop("version", None)
    _kernel_4(attributes)
    attributes["doi"] = doi
    attributes["url"] = url
    attributes["alternateIdentifiers"] = [
        {"alternateIdentifier": url, "alternateIdentifierType": "URL"}
    ]
    _with_relations(attributes, [_related(v, "HasVersion") for v in version_dois])
    if event is not None:
        attributes["event"] = event.value
    return attributes


def draft_attributes(*, doi: str, url: str, title: str) -> dict[str, Any]:
    """What a Draft DOI needs when the metadata can't be converted yet (a new dandiset's
    draft, without contributors or licence): DataCite keeps a Draft with its DOI alone; the
    title and URL help whoever finds it in DataCite Fabrica."""
    return {
        "doi": doi,
        "url": url,
        "titles": [{"title": title or doi}],
        "types": {"resourceTypeGeneral": "Dataset", "resourceType": "Neural Data"},
    }


def step_attributes(step: DoiStep, doi: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The attributes a step sends: *metadata* (from the builders above) with its event, or the
    event alone (a hide)."""
    attributes = dict(metadata) if step.with_metadata and metadata is not None else {"doi": doi}
    attributes.pop("event", None)
    if step.event is not None:
        attributes["event"] = step.event.value
    return attributes


@functools.cache
def _kernel_4_validator() -> Draft7Validator:
    """DataCite's kernel-4 metadata schema: the copy dandischema ships (and validates with)."""
    from dandischema import datacite

    path = Path(datacite.__file__).parent / "schema" / f"{KERNEL_4_SCHEMA}.json"
    return Draft7Validator(json.loads(path.read_text(encoding="utf-8")))


#: The name of the kernel-4 schema file in dandischema's package (Invenio's DataCite 4.5).
KERNEL_4_SCHEMA = "inveniosoftware-4.5-81-g160250d"


def needs_full_metadata(attributes: dict[str, Any]) -> bool:
    """Whether DataCite checks *attributes* against its whole schema: a DOI published (made
    Findable) or sent with its full metadata (creators)."""
    return attributes.get("event") == DoiEvent.PUBLISH.value or "creators" in attributes


def kernel_4_errors(attributes: dict[str, Any]) -> str | None:
    """What DataCite's kernel-4 schema finds wrong in *attributes* (bounded), or ``None``: the
    archive checks before sending, as DataCite will."""
    payload = {k: v for k, v in attributes.items() if k not in ("event", "doi", "url")}
    errors = sorted(_kernel_4_validator().iter_errors(payload), key=lambda e: list(e.path))
    if not errors:
        return None
    text = "; ".join(
        f"{'/'.join(str(p) for p in e.path) or '(top)'}: {e.message}" for e in errors[:5]
    )
    return text[:ERROR_LIMIT]


def document(doi: str, attributes: dict[str, Any]) -> dict[str, Any]:
    """DataCite's JSON:API request document of a DOI."""
    return {"data": {"id": doi, "type": "dois", "attributes": attributes}}


#: The most of DataCite's error message the archive keeps.
ERROR_LIMIT = 2000


def datacite_errors(body: object) -> str | None:
    """DataCite's message in an error document ``{"errors": [{"source", "title"}]}``:
    ``source: title; ...`` (bounded), or ``None`` if *body* is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("errors"), list):
        return None
    parts = []
    for error in body["errors"]:
        if not isinstance(error, dict):
            continue
        title = str(error.get("title", "")).strip()
        source = str(error.get("source", "")).strip()
        if title:
            parts.append(f"{source}: {title}" if source else title)
    if not parts:
        return None
    return "; ".join(parts)[:ERROR_LIMIT]
