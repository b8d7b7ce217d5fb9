"""The client as a newcomer meets it: a directory that is not a Zarr is not uploaded, the
publishing note comes once per Zarr, and errors speak of ZARRCHIVE_TOKEN / --token, never of
HTTP headers or the HTTP layer's exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from zarrchive import open_store
from zarrchive.cli import app
from zarrchive.client import ApiClient
from zarrchive.errors import ApiError, InvalidInput

NOTE = "zarrchive: NOTE: publishing dandiset"


def upload(local: Path, dandiset: str, env: dict[str, str], *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["upload", str(local), "--dandiset", dandiset, *extra], env=env
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_not_a_zarr_is_not_uploaded(
    tmp_path: Path, client: ApiClient, client_env: dict[str, str], dandiset: str
) -> None:
    empty = tmp_path / "empty.zarr"
    (empty / "sub").mkdir(parents=True)  # folders, but no file
    code, out, err = upload(empty, dandiset, client_env)
    assert (code, out) == (2, "")
    assert err == (
        f"zarrchive upload: {str(empty)!r} is empty: there is nothing to upload (pass --force "
        "to upload it anyway, which leaves the archive's Zarr empty too)\n"
    )
    plain = tmp_path / "photos"
    (plain / "2024").mkdir(parents=True)
    (plain / "2024" / "a.jpg").write_bytes(b"jpeg")
    (plain / ".zattrs").write_bytes(b"{}")  # attributes alone do not make a Zarr
    code, out, err = upload(plain, dandiset, client_env)
    assert (code, out) == (2, "")
    assert err.startswith(f"zarrchive upload: {str(plain)!r} is not a Zarr: it has no Zarr ")
    assert "(.zgroup, .zarray or zarr.json)" in err and "--force" in err
    code, _, err = upload(plain, dandiset, client_env, "--dry-run")
    assert code == 2 and "is not a Zarr" in err
    assert client.find_zarr(dandiset, "photos") is None  # nothing created
    assert client.find_zarr(dandiset, "empty.zarr") is None
    # --force uploads it anyway
    code, out, err = upload(plain, dandiset, client_env, "--force")
    assert code == 0, err
    assert "uploaded 2 files" in out
    zarr = client.find_zarr(dandiset, "photos")
    assert zarr is not None and zarr.file_count == 2


@pytest.mark.parametrize("metadata", [".zgroup", ".zarray", "zarr.json"])
def test_each_kind_of_zarr_metadata_is_a_zarr(
    tmp_path: Path, client_env: dict[str, str], dandiset: str, metadata: str
) -> None:
    local = tmp_path / "z.zarr"
    local.mkdir()
    (local / metadata).write_bytes(b"{}")
    code, out, err = upload(local, dandiset, client_env, "--dry-run")
    assert code == 0, err
    assert out.startswith("dry run: would upload 1 files")


def test_the_publishing_note_comes_once_per_zarr(
    tmp_path: Path, client_env: dict[str, str], dandiset: str
) -> None:
    local = tmp_path / "once.zarr"
    (local / "a").mkdir(parents=True)
    (local / "zarr.json").write_bytes(b"{}")
    (local / "a" / "0").write_bytes(b"0")
    code, _, err = upload(local, dandiset, client_env)
    assert code == 0, err
    assert err.count(NOTE) == 1  # the Zarr joined the dandiset
    code, out, err = upload(local, dandiset, client_env)  # a no-op
    assert code == 0 and "uploaded 0 files" in out
    assert NOTE not in err
    (local / "a" / "1").write_bytes(b"1")  # a change: the Zarr was already in the dandiset
    code, out, err = upload(local, dandiset, client_env)
    assert code == 0 and "uploaded 1 files" in out
    assert NOTE not in err


def test_errors_speak_of_the_token_not_of_headers(
    tmp_path: Path, client_env: dict[str, str], embargoed: tuple[str, str]
) -> None:
    url = client_env["ZARRCHIVE_URL"]
    dandiset, zarr_id = embargoed
    local = tmp_path / "x.zarr"
    local.mkdir()
    (local / "zarr.json").write_bytes(b"{}")
    anonymous = {**client_env, "ZARRCHIVE_TOKEN": ""}
    code, _, err = upload(local, dandiset, anonymous)
    assert code == 2
    assert "Authorization" not in err and "header" not in err
    assert "set ZARRCHIVE_TOKEN or pass --token" in err
    # the library: open_store raises the project's exception with the same words
    with pytest.raises(ApiError) as caught:
        open_store(zarr_id, api_url=url, token=None)
    assert caught.value.status_code == 401
    assert "Authorization" not in caught.value.message
    assert caught.value.message.startswith(f"dandiset {dandiset} is embargoed")
    assert "ZARRCHIVE_TOKEN" in caught.value.message
    # a token mangled by a copy and paste: one clear line, not an error of the HTTP layer
    for token in ("tok en", "tökén"):
        with pytest.raises(InvalidInput, match=r"the API token \(ZARRCHIVE_TOKEN / --token\)"):
            open_store(zarr_id, api_url=url, token=token)
        code, _, err = upload(local, dandiset, {**client_env, "ZARRCHIVE_TOKEN": token})
        assert code == 2 and "the API token (ZARRCHIVE_TOKEN / --token) is malformed" in err
    # blanks around a pasted token are dropped
    with ApiClient(url, f"  {client_env['ZARRCHIVE_TOKEN']}\n") as client:
        assert client.get_zarr(zarr_id).zarr_id == zarr_id


def test_open_store_without_an_archive_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZARRCHIVE_URL", raising=False)
    with pytest.raises(InvalidInput, match=r"set ZARRCHIVE_URL or pass api_url="):
        open_store("00000000-0000-0000-0000-000000000000")


def test_a_request_the_http_layer_refuses_is_one_clear_error(client_env: dict[str, str]) -> None:
    with ApiClient(client_env["ZARRCHIVE_URL"]) as client, pytest.raises(InvalidInput):
        client.request("GET", "http://[::1")  # an address httpx cannot even parse
