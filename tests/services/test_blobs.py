"""Blob uploads: validate and cancel racing never leave a blob without its object."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.helpers.assets import md5, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.presigned import put_headers
from tests.helpers.waiting import EVENT_TIMEOUT
from zarrchive.db.models import Blob, User
from zarrchive.errors import NotFound
from zarrchive.services.dandi import blobs
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY


def test_cancel_racing_validate_keeps_the_blobs_object(
    api: httpx.Client, dandiset: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"the content of a small file"
    plan = ok(
        api.post(
            "/api/uploads/initialize/",
            json={"size": len(data), "md5": md5(data), "dandiset": dandiset},
        )
    )
    (part,) = plan["parts"]
    response = httpx.put(
        part["upload_url"], content=data, headers=put_headers(part["upload_url"], data)
    )
    assert response.status_code == 200
    with archive.db.session() as session:
        owner = Caller.of(session.query(User).filter_by(username="owner").one())
    inside = threading.Event()
    same_content = blobs._same_content

    def slow_same_content(*args: Any) -> Any:
        inside.set()  # validate holds the upload's row lock now
        time.sleep(1.0)
        return same_content(*args)

    monkeypatch.setattr(blobs, "_same_content", slow_same_content)
    outcome: list[object] = []

    def cancel() -> None:
        assert inside.wait(EVENT_TIMEOUT), "validate did not take the upload's row lock"
        try:
            blobs.cancel(archive, owner, plan["upload_id"])
            outcome.append("cancelled")
        except NotFound as exc:
            outcome.append(exc)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    info = blobs.validate(archive, owner, plan["upload_id"])
    canceller.join()
    assert info is not None
    assert isinstance(outcome[0], NotFound)  # too late: the upload is a blob now
    with archive.db.session() as session:
        blob = session.get(Blob, info.blob_id)
        assert blob is not None
        key = blob.key
    assert archive.store.get(key) == data  # its object was not discarded
