"""The landing page's reading of metadata: DANDI's words and citation, and any JSON at all
(the uploader's) read without an error and within bounds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.services.dandi.validation import citation
from zarrchive.services.views.dandiset_summary import (
    DESCRIPTION_LIMIT,
    LIST_LIMIT,
    TEXT_LIMIT,
    readable_role,
    summarize,
)

NOW = datetime(2026, 11, 26, tzinfo=UTC)
WEB = "https://archive.example.org"


def summary_of(metadata: dict[str, Any], version: str = "draft") -> Any:
    return summarize(metadata, identifier="000007", version=version, web_url=WEB, now=NOW)


@pytest.mark.parametrize(
    ("role", "words"),
    [
        ("dcite:ContactPerson", "Contact person"),
        ("dcite:Author", "Author"),
        ("dcite:DataCurator", "Data curator"),
        ("dcite:IsDescribedBy", "Is described by"),
        ("dcite:RightsHolder", "Rights holder"),
        ("dandi:SponsorRole", "Sponsor role"),
        ("Funder", "Funder"),
        ("dcite:HostingInstitution", "Hosting institution"),
    ],
)
def test_roles_read_as_words(role: str, words: str) -> None:
    assert readable_role(role) == words


def test_the_draft_citation_is_dandis() -> None:
    metadata = {
        "name": "A study.",
        "contributor": [
            {"name": "Doe, Jane", "includeInCitation": True},
            {"name": "Agency", "schemaKey": "Organization", "includeInCitation": False},
            {"name": "Roe, Richard", "includeInCitation": True},
        ],
    }
    found = summary_of(metadata)
    url = f"{WEB}/dandiset/000007/draft"
    assert found.citation == (
        f"Doe, Jane; Roe, Richard (2026) A study (Version draft) [Data set]. DANDI Archive. {url}"
    )
    assert found.citation == citation({**metadata, "version": "draft", "url": url}, 2026)
    assert found.download_command == f"dandi download {url}"
    # nobody in the citation: DANDI's other form
    assert summary_of({"name": "X"}).citation == (
        f"X (2026). (Version draft) [Data set]. DANDI Archive. {url}"
    )


def test_a_published_version_shows_its_stored_citation_and_doi() -> None:
    found = summary_of(
        {"name": "X", "citation": "As published.", "doi": "10.48324/dandi.000007/0.1"},
        version="0.261126.0101",
    )
    assert found.citation == "As published."
    assert found.doi == "10.48324/dandi.000007/0.1"
    # a draft's stored citation is stale by definition: computed again
    assert summary_of({"name": "X", "citation": "stale"}).citation != "stale"


def test_links_only_to_http_and_known_identifiers() -> None:
    found = summary_of(
        {
            "contributor": [
                {"name": "A", "identifier": "https://orcid.org/0000-0002-1825-0097"},
                {"name": "B", "identifier": "0000-0002-1825-009X"},
                {"name": "C", "url": "javascript:alert(1)"},
                {"name": "D", "schemaKey": "Organization", "identifier": "01cwqze88"},
                {"name": "E", "schemaKey": "Organization", "identifier": "0000-0002-1825-0097"},
                {"name": "F", "url": "https://lab.example.org"},
            ],
            "relatedResource": [
                {"identifier": "doi:10.1/x", "relation": "dcite:IsCitedBy"},
                {"url": "data:text/html,x", "name": "bad"},
                {"relation": "dcite:IsPartOf"},
            ],
        }
    )
    links = {c.name: c.link for c in found.contributors}
    assert links == {
        "A": "https://orcid.org/0000-0002-1825-0097",
        "B": "https://orcid.org/0000-0002-1825-009X",
        "C": None,
        "D": "https://ror.org/01cwqze88",
        "E": None,
        "F": "https://lab.example.org",
    }
    assert [(r.name, r.url, r.relation) for r in found.related] == [
        ("https://doi.org/10.1/x", "https://doi.org/10.1/x", "Is cited by"),
        ("bad", None, ""),
    ]


def test_licenses_by_spdx_identifier() -> None:
    found = summary_of({"license": ["spdx:CC0-1.0", "spdx:MIT", 7, None]})
    assert [(x.identifier, x.name, x.url) for x in found.licenses] == [
        (
            "CC0-1.0",
            "Creative Commons Zero v1.0 Universal",
            "https://spdx.org/licenses/CC0-1.0.html",
        ),
        ("MIT", "MIT", "https://spdx.org/licenses/MIT.html"),
    ]


def test_everything_is_bounded() -> None:
    many = [{"name": f"P{i}", "includeInCitation": True} for i in range(LIST_LIMIT + 5)]
    found = summary_of(
        {
            "description": "d" * (DESCRIPTION_LIMIT + 1),
            "contributor": many,
            "keywords": ["k" * (TEXT_LIMIT * 3)] * (LIST_LIMIT * 2),
        }
    )
    assert len(found.description) == DESCRIPTION_LIMIT and found.description_cut
    assert len(found.contributors) == LIST_LIMIT and len(found.keywords) == LIST_LIMIT
    assert all(len(k) == TEXT_LIMIT for k in found.keywords)
    assert found.truncated == ["contributors", "keywords"]
    assert not summary_of({"description": "short"}).description_cut


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "name",
        "description",
        "contributor",
        "license",
        "keywords",
        "relatedResource",
        "doi",
        "citation",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(FIELDS, JSON), st.sampled_from(["draft", "0.261126.0101"]))
def test_any_metadata_reads_without_error(metadata: dict[str, Any], version: str) -> None:
    found = summary_of(metadata, version)
    assert isinstance(found.citation, str) and found.citation
    assert all(
        c.link is None or c.link.startswith(("https://", "http://")) for c in found.contributors
    )
    assert all(r.url is None or r.url.startswith(("https://", "http://")) for r in found.related)
    assert len(found.contributors) <= LIST_LIMIT and len(found.description) <= DESCRIPTION_LIMIT
