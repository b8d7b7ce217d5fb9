"""The dandiset page shows what DANDI's landing page shows (description, contributors,
license, keywords, how to cite, the download command), and its JSON links work for the
signed-in visitor, on an embargoed dandiset too, while the API still ignores the cookie."""

from __future__ import annotations

import html
import re

import httpx

from tests.conftest import Users
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.metadata import dandiset_metadata
from tests.helpers.web_site import browser
from tests.helpers.zarr_client import expect

pytestmark = SQLITE_ONLY


def create(api: httpx.Client, *, embargo: bool = False) -> str:
    metadata = dandiset_metadata(
        "Mouse V1 recordings",
        description="Two-photon imaging of V1.\nSecond paragraph <b>not bold</b>.",
        keywords=["mouse", "two-photon"],
        contributor=[
            {
                "schemaKey": "Person",
                "name": "Doe, Jane",
                "identifier": "0000-0002-1825-0097",
                "roleName": ["dcite:ContactPerson", "dcite:Author"],
                "includeInCitation": True,
                "affiliation": [{"schemaKey": "Affiliation", "name": "Example University"}],
            },
            {
                "schemaKey": "Organization",
                "name": "Example Funding Agency",
                "identifier": "https://ror.org/01cwqze88",
                "roleName": ["dcite:Funder"],
                "includeInCitation": False,
            },
            {
                "schemaKey": "Person",
                "name": "Roe, Richard",
                "includeInCitation": True,
                "url": "javascript:alert(1)",
            },
        ],
        relatedResource=[
            {
                "schemaKey": "Resource",
                "identifier": "doi:10.1000/xyz",
                "relation": "dcite:IsDescribedBy",
                "name": "The paper",
            }
        ],
    )
    body = {"name": "Mouse V1 recordings", "metadata": metadata, "embargo": embargo}
    return str(expect(api.post("/api/dandisets/", json=body))["identifier"])


def shown(page: str) -> str:
    """The page's words, as a visitor reads them."""
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", page))
    return html.unescape(re.sub(r"\( ", "(", re.sub(r" ([),;.])", r"\1", words)))


def test_the_page_shows_the_metadata_a_landing_page_shows(base_url: str, api: httpx.Client) -> None:
    dandiset = create(api)
    with browser(base_url) as anon:
        response = anon.get(f"/dandiset/{dandiset}")
        assert response.status_code == 200, response.text
        page = response.text
    words = shown(page)
    assert "Two-photon imaging of V1." in words and "Second paragraph <b>not bold</b>." in words
    assert "<b>not bold</b>" not in page  # escaped, never markup
    assert 'href="https://orcid.org/0000-0002-1825-0097"' in page
    assert "Doe, Jane (Contact person, Author), Example University" in words
    assert 'href="https://ror.org/01cwqze88"' in page and "Example Funding Agency (Funder)" in words
    assert "javascript:" not in page and "Roe, Richard" in words
    assert 'href="https://spdx.org/licenses/CC-BY-4.0.html"' in page
    assert "Creative Commons Attribution 4.0 International" in words
    assert "mouse, two-photon" in words
    assert 'href="https://doi.org/10.1000/xyz"' in page and "The paper (is described by)" in words
    year = re.search(r"\((\d{4})\) Mouse V1", words)
    assert year is not None
    assert (
        f"Doe, Jane; Roe, Richard ({year.group(1)}) Mouse V1 recordings (Version draft) "
        f"[Data set]. DANDI Archive. {base_url}/dandiset/{dandiset}/draft" in words
    )
    assert f"dandi download {base_url}/dandiset/{dandiset}/draft" in words


def test_json_links_work_signed_in_on_an_embargoed_dandiset(
    base_url: str, api: httpx.Client, users: Users
) -> None:
    dandiset = create(api, embargo=True)
    metadata_link = f"/dandiset/{dandiset}/draft/metadata.json"
    audit_link = f"/dandiset/{dandiset}/audit.json"
    with browser(base_url, users.owner) as owner:
        page = owner.get(f"/dandiset/{dandiset}").text
        assert f'href="{metadata_link}"' in page and f'href="{audit_link}"' in page
        assert "set DANDI_API_KEY to your API token first" in shown(page)
        response = owner.get(metadata_link)
        assert (
            response.status_code == 200 and response.headers["content-type"] == "application/json"
        )
        assert response.json() == expect(api.get(f"/api/dandisets/{dandiset}/versions/draft/"))
        trail = owner.get(audit_link)
        assert trail.status_code == 200
        assert trail.json() == expect(api.get(f"/api/dandisets/{dandiset}/audit/"))
        assert "access-control-allow-origin" not in trail.headers
        # the API itself never honours the pages' cookie
        assert owner.get(f"/api/dandisets/{dandiset}/versions/draft/").status_code == 401
    with browser(base_url, users.other) as other:
        assert other.get(metadata_link).status_code == 404
        assert other.get(audit_link).status_code == 404
    with browser(base_url) as anon:
        assert anon.get(metadata_link).status_code == 401
        assert anon.get(audit_link).status_code == 401
