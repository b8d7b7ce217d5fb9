"""``ZARRCHIVE_OIDC_*``: one provider unsuffixed, more with an id; mistakes said at start."""

from __future__ import annotations

import pytest

from zarrchive.config import OidcProvider, Settings
from zarrchive.errors import ConfigurationError


def test_no_provider_by_default() -> None:
    assert Settings.from_env({}).oidc_providers == ()


def test_one_provider_and_more_by_id() -> None:
    settings = Settings.from_env(
        {
            "ZARRCHIVE_OIDC_ISSUER": "https://orcid.org/",
            "ZARRCHIVE_OIDC_CLIENT_ID": "APP-1",
            "ZARRCHIVE_OIDC_CLIENT_SECRET": "s1",
            "ZARRCHIVE_OIDC_NAME": "ORCID",
            "ZARRCHIVE_OIDC_UNI_ISSUER": "https://login.uni.example/realms/staff",
            "ZARRCHIVE_OIDC_UNI_CLIENT_ID": "archive",
        }
    )
    assert settings.oidc_providers == (
        OidcProvider("default", "https://orcid.org", "APP-1", "s1", "ORCID"),
        OidcProvider(
            "uni", "https://login.uni.example/realms/staff", "archive", None, "login.uni.example"
        ),
    )


@pytest.mark.parametrize(
    "issuer",
    ["http://idp.example", "ftp://idp.example", "https://", "https://idp.example/?x=1", "idp"],
)
def test_a_bad_issuer_is_refused(issuer: str) -> None:
    with pytest.raises(ConfigurationError, match="ZARRCHIVE_OIDC_ISSUER"):
        Settings.from_env({"ZARRCHIVE_OIDC_ISSUER": issuer, "ZARRCHIVE_OIDC_CLIENT_ID": "c"})


def test_http_only_on_loopback() -> None:
    for issuer in ("http://127.0.0.2:3000", "http://localhost:8080/realms/x"):
        env = {"ZARRCHIVE_OIDC_ISSUER": issuer, "ZARRCHIVE_OIDC_CLIENT_ID": "c"}
        assert Settings.from_env(env).oidc_providers[0].issuer == issuer


def test_a_client_id_is_required() -> None:
    with pytest.raises(ConfigurationError, match="ZARRCHIVE_OIDC_X_CLIENT_ID"):
        Settings.from_env({"ZARRCHIVE_OIDC_X_ISSUER": "https://idp.example"})
