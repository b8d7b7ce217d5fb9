"""``ZARRCHIVE_DOI_*`` (issue #37): all four or none; a checked URL and prefix; the password
never shown."""

from __future__ import annotations

import pytest

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError

FOUR = {
    "ZARRCHIVE_DOI_API_URL": "https://api.test.datacite.org/",
    "ZARRCHIVE_DOI_PREFIX": "10.80507",
    "ZARRCHIVE_DOI_USER": "REPO.ID",
    "ZARRCHIVE_DOI_PASSWORD": "s3cret",
}


def test_unset_is_no_dois() -> None:
    assert Settings.from_env({}).doi is None
    assert Settings.from_env({"ZARRCHIVE_DOI_PUBLISH": "true"}).doi is None


def test_all_four() -> None:
    doi = Settings.from_env({**FOUR, "ZARRCHIVE_DOI_PUBLISH": "true"}).doi
    assert doi is not None
    assert (doi.api_url, doi.prefix, doi.user, doi.publish) == (
        "https://api.test.datacite.org",
        "10.80507",
        "REPO.ID",
        True,
    )
    assert "s3cret" not in repr(doi) and "s3cret" not in repr(Settings.from_env(FOUR))
    assert Settings.from_env(FOUR).doi.publish is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("ZARRCHIVE_DOI_PASSWORD", "", "ZARRCHIVE_DOI_PASSWORD unset"),
        ("ZARRCHIVE_DOI_PREFIX", "10.1/x", "a DOI prefix"),
        ("ZARRCHIVE_DOI_API_URL", "ftp://datacite", "DataCite's REST API"),
        ("ZARRCHIVE_DOI_API_URL", "https://u:p@api.datacite.org", "without credentials"),
        ("ZARRCHIVE_DOI_PUBLISH", "maybe", "true or false"),
    ],
)
def test_refused(name: str, value: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        Settings.from_env({**FOUR, name: value})
