"""A page of another site, in a real browser (headless Chromium), reads the archive: it
fetches the API with a token and range-reads a chunk from the public bucket (CORS); its
attempt to change something is refused and changes nothing."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Users
from tests.helpers.api_uploads import upload
from tests.helpers.browser import other_origin
from tests.helpers.databases import SQLITE_ONLY
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY

READ_AND_WRITE = """
async ([api, zarrId, token, chunkUrl]) => {
  const out = {};
  const info = await fetch(`${api}/api/zarr/${zarrId}/`, {headers: {Authorization: `token ${token}`}});
  out.status = info.status;
  out.checksum = (await info.json()).checksum;
  const chunk = await fetch(chunkUrl, {headers: {Range: "bytes=2-5"}});
  out.chunkStatus = chunk.status;
  out.chunk = await chunk.text();
  out.contentRange = chunk.headers.get("Content-Range");
  out.etag = chunk.headers.get("ETag");
  for (const [name, init] of [
    ["json", {method: "POST", headers: {"Content-Type": "application/json",
              Authorization: `token ${token}`}, body: JSON.stringify({name: "cross-site"})}],
    ["simple", {method: "POST", headers: {"Content-Type": "text/plain"},
                body: JSON.stringify({name: "cross-site"})}],
  ]) {
    try {
      const r = await fetch(`${api}/api/dandisets/`, init);
      out[name] = `answered ${r.status}`;
    } catch (e) {
      out[name] = "blocked";
    }
  }
  return out;
}
"""


def test_a_page_of_another_origin_reads_but_cannot_write(
    chromium: Any,
    api: httpx.Client,
    live_server: Any,
    archive: Archive,
    users: Users,
    zarr_id: str,
) -> None:
    info = upload(api, zarr_id, {".zgroup": b'{"zarr_format": 2}', "arr/0": b"0123456789"})
    before = api.get("/api/dandisets/").json()["count"]
    chunk_url = archive.store.public_url(f"zarr/{zarr_id}/arr/0")
    with other_origin("<!doctype html><title>viewer</title><p>a viewer</p>") as origin:
        assert origin != live_server.url
        context = chromium.new_context()
        try:
            page = context.new_page()
            page.goto(origin + "/")
            got = page.evaluate(READ_AND_WRITE, [live_server.url, zarr_id, users.owner, chunk_url])
        finally:
            context.close()
    assert got["status"] == 200 and got["checksum"] == info["checksum"]
    assert got["chunkStatus"] == 206 and got["chunk"] == "2345"
    assert got["contentRange"] == "bytes 2-5/10" and got["etag"]
    assert got["json"] == "blocked" and got["simple"] == "blocked"
    assert api.get("/api/dandisets/").json()["count"] == before
