"""Search (issue #24 part 3): ``GET /api/dandisets/?search=`` reaches the name, description,
keywords, contributors' names and asset paths, ranked and paged, on SQLite (FTS5) and
PostgreSQL (full-text search); the page's search box uses it."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Users
from tests.helpers.assets import add_blob_asset, assets_url, client_for, ok


def found(client: httpx.Client, query: str, **params: Any) -> list[str]:
    body = ok(client.get("/api/dandisets/", params={"search": query, **params}))
    return [d["identifier"] for d in body["results"]]


def make(api: httpx.Client, name: str, **metadata: Any) -> str:
    created = ok(api.post("/api/dandisets/", json={"name": name, "metadata": metadata}))
    return str(created["identifier"])


def test_search_reaches_every_field_ranked_and_paged(
    api: httpx.Client, anon: httpx.Client, users: Users
) -> None:
    by_name = make(api, "Hippocampus recordings")
    by_description = make(api, "first", description="Calcium imaging of the hippocampus")
    by_keyword = make(api, "second", keywords=["optogenetics", "Zebrafish"])
    by_contributor = make(
        api, "third", contributor=[{"name": "Ramón y Cajal, Santiago", "roleName": []}]
    )
    by_path = make(api, "fourth")
    asset = add_blob_asset(api, by_path, b"x" * 10, "sub-axolotl/sub-axolotl_ses-2_ecephys.nwb")

    assert found(anon, "hippocampus") == [by_name, by_description]  # the name ranks first
    assert found(anon, "HIPPO") == [by_name, by_description]  # case, prefixes
    assert found(anon, "zebrafish") == [by_keyword]
    assert found(anon, "cajal santiago") == [by_contributor]  # every word, any order
    assert found(anon, "ramón") == [by_contributor]
    assert found(anon, "axolotl ecephys") == [by_path]
    assert found(anon, "calcium hippocampus imaging") == [by_description]
    assert found(anon, "hippocampus zebrafish") == []
    assert found(anon, by_keyword) == [by_keyword]  # an identifier, as before
    assert found(anon, "%") == [] and found(anon, '"*') == []  # nothing but punctuation
    assert found(anon, "ppocampus rec") == [by_name]  # within a name, as before

    # paged: the count is of every hit
    page = ok(anon.get("/api/dandisets/", params={"search": "hippocampus", "page_size": 1}))
    assert page["count"] == 2 and [d["identifier"] for d in page["results"]] == [by_name]
    page2 = ok(anon.get(page["next"]))
    assert [d["identifier"] for d in page2["results"]] == [by_description]
    assert found(anon, "hippocampus", ordering="-id") == [by_description, by_name]

    # the index follows changes: renamed, new description, asset moved and removed
    ok(
        api.put(
            f"/api/dandisets/{by_name}/versions/draft/",
            json={"metadata": {"name": "Cortex recordings"}},
        )
    )
    assert found(anon, "hippocampus") == [by_description]
    assert found(anon, "cortex") == [by_name]
    ok(
        api.put(
            assets_url(by_path) + f"{asset['asset_id']}/",
            json={"metadata": {"path": "sub-newt/x.nwb"}, "blob_id": asset["blob_id"]},
        )
    )
    assert found(anon, "axolotl") == [] and found(anon, "newt") == [by_path]
    assert api.delete(assets_url(by_path) + f"{asset['asset_id']}/").status_code == 204
    assert found(anon, "newt") == []


def test_search_shows_only_what_the_caller_may_see(
    api: httpx.Client, anon: httpx.Client, users: Users
) -> None:
    secret = ok(
        api.post(
            "/api/dandisets/",
            params={"embargo": "true"},
            json={"name": "secret", "metadata": {"description": "quokka"}},
        )
    )["identifier"]
    assert found(anon, "quokka", embargoed="true") == []
    with client_for(api, users.other) as other:
        assert found(other, "quokka", embargoed="true") == []
    assert found(api, "quokka", embargoed="true") == [secret]
    assert found(api, "quokka") == []  # DANDI's default: embargoed ones only when asked


def test_the_page_search_box_uses_it(api: httpx.Client, anon: httpx.Client) -> None:
    wanted = make(api, "plain", description="recordings of a platypus")
    make(api, "other")
    page = anon.get("/", params={"search": "platypus"})
    assert page.status_code == 200
    assert f"/dandiset/{wanted}" in page.text and "plain" in page.text
    assert "other</a>" not in page.text
