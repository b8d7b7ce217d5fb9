"""What a dandiset's landing page shows of its metadata, as DANDI's landing page shows it:
description, contributors with their roles, license, keywords, related resources, how to cite
it and the ``dandi download`` command to copy.

Pure: a version's stored metadata in, a :class:`DandisetSummary` out.  The metadata is the
uploader's: every field may be missing, of the wrong type or huge, so each is read defensively
and bounded (the page links the whole JSON for the rest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from zarrchive.services.dandi.validation import citation

#: At most this many characters of the description are shown (the JSON has the rest).
DESCRIPTION_LIMIT = 20_000
#: At most this many contributors, keywords and related resources are listed.
LIST_LIMIT = 200
#: Any single name, role, keyword or URL shown is cut at this length.
TEXT_LIMIT = 500

_ORCID = re.compile(r"^(?:https?://orcid\.org/)?(\d{4}-\d{4}-\d{4}-\d{3}[\dX])$")
_ROR = re.compile(r"^(?:https?://ror\.org/)?(0[a-z0-9]{8})$")
#: The license names DANDI offers (dandischema's ``LicenseType``), by SPDX identifier.
_LICENSE_NAMES = {
    "CC0-1.0": "Creative Commons Zero v1.0 Universal",
    "CC-BY-4.0": "Creative Commons Attribution 4.0 International",
}


@dataclass(frozen=True)
class Contributor:
    name: str
    #: Readable roles ("Contact person", "Author"), in the metadata's order.
    roles: list[str]
    #: A link for the contributor (ORCID for a person, ROR for an organization, or a URL).
    link: str | None
    affiliations: list[str]
    is_person: bool
    in_citation: bool


@dataclass(frozen=True)
class License:
    #: The SPDX identifier, e.g. ``CC-BY-4.0``.
    identifier: str
    name: str
    url: str


@dataclass(frozen=True)
class RelatedResource:
    name: str
    url: str | None
    relation: str


@dataclass(frozen=True)
class DandisetSummary:
    description: str
    #: The description was longer than :data:`DESCRIPTION_LIMIT` and is cut.
    description_cut: bool
    contributors: list[Contributor]
    licenses: list[License]
    keywords: list[str]
    related: list[RelatedResource]
    #: How to cite this version (DANDI's citation format).
    citation: str
    #: The DOI of a published version, when it has one.
    doi: str | None
    #: The command that downloads this version with dandi-cli.
    download_command: str
    #: Lists cut at :data:`LIST_LIMIT` (the JSON has the rest).
    truncated: list[str] = field(default_factory=list)


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value[:TEXT_LIMIT] if value else None


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def readable_role(role: str) -> str:
    """``dcite:ContactPerson`` -> ``Contact person``; ``dcite:DataCurator`` -> ``Data curator``."""
    bare = role.split(":", 1)[-1]
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", bare) or [bare]
    return " ".join(
        [words[0]] + [w if w.isupper() and len(w) > 1 else w.lower() for w in words[1:]]
    )


def _link(identifier: str | None, url: str | None, is_person: bool) -> str | None:
    if identifier:
        orcid = _ORCID.match(identifier)
        if is_person and orcid:
            return f"https://orcid.org/{orcid.group(1)}"
        ror = _ROR.match(identifier)
        if not is_person and ror:
            return f"https://ror.org/{ror.group(1)}"
    if url and url.startswith(("https://", "http://")):
        return url
    return None


def _contributor(value: object) -> Contributor | None:
    if not isinstance(value, dict):
        return None
    name = _text(value.get("name"))
    if name is None:
        return None
    is_person = value.get("schemaKey", "Person") != "Organization"
    roles = [readable_role(r) for r in map(_text, _items(value.get("roleName"))) if r]
    affiliations = [
        a
        for a in (
            _text(x.get("name")) for x in _items(value.get("affiliation")) if isinstance(x, dict)
        )
        if a
    ]
    return Contributor(
        name=name,
        roles=roles[:20],
        link=_link(_text(value.get("identifier")), _text(value.get("url")), is_person),
        affiliations=affiliations[:20],
        is_person=is_person,
        in_citation=value.get("includeInCitation") is True,
    )


def _license(value: object) -> License | None:
    text = _text(value)
    if text is None:
        return None
    identifier = text.split(":", 1)[1] if text.startswith("spdx:") else text
    return License(
        identifier=identifier,
        name=_LICENSE_NAMES.get(identifier, identifier),
        url=f"https://spdx.org/licenses/{identifier}.html",
    )


def _related(value: object) -> RelatedResource | None:
    if not isinstance(value, dict):
        return None
    url = _text(value.get("url")) or _text(value.get("identifier"))
    if url and url.startswith("doi:"):
        url = f"https://doi.org/{url[4:]}"
    if url and not url.startswith(("https://", "http://")):
        url = None
    name = _text(value.get("name")) or url or _text(value.get("identifier"))
    if name is None:
        return None
    relation = _text(value.get("relation")) or ""
    return RelatedResource(name=name, url=url, relation=readable_role(relation) if relation else "")


def summarize(
    metadata: dict[str, Any], *, identifier: str, version: str, web_url: str, now: datetime
) -> DandisetSummary:
    """The landing page's view of *metadata*, the stored metadata of *version* of dandiset
    *identifier*; *web_url* is the archive's address as the visitor reached it (the page's
    links and the download command use it); *now* dates a draft's citation, as DANDI does."""
    truncated: list[str] = []

    def bounded(name: str, items: list[Any]) -> list[Any]:
        kept = [item for item in items if item is not None]
        if len(kept) > LIST_LIMIT:
            truncated.append(name)
        return kept[:LIST_LIMIT]

    description = metadata.get("description")
    description = description if isinstance(description, str) else ""
    contributors = bounded(
        "contributors", [_contributor(c) for c in _items(metadata.get("contributor"))]
    )
    licenses = bounded("licenses", [_license(x) for x in _items(metadata.get("license"))])
    keywords = bounded("keywords", [_text(k) for k in _items(metadata.get("keywords"))])
    related = bounded("related", [_related(r) for r in _items(metadata.get("relatedResource"))])
    page = f"{web_url}/dandiset/{identifier}/{version}"
    doi = _text(metadata.get("doi"))
    stored = _text(metadata.get("citation")) if version != "draft" else None
    if stored is None:
        # DANDI's own rule, over the fields citation() reads (bounded: names are cut above)
        cited = {
            "name": _text(metadata.get("name")) or identifier,
            "version": version,
            "url": page,
            "contributor": [
                {"name": c.name, "includeInCitation": c.in_citation} for c in contributors
            ],
        }
        if doi:
            cited["doi"] = doi
        stored = citation(cited, now.year)
    return DandisetSummary(
        description=description[:DESCRIPTION_LIMIT],
        description_cut=len(description) > DESCRIPTION_LIMIT,
        contributors=contributors,
        licenses=licenses,
        keywords=keywords,
        related=related,
        citation=stored,
        doi=doi,
        download_command=f"dandi download {page}",
        truncated=truncated,
    )
