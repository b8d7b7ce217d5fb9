"""``ZARRCHIVE_PUBLISH_REQUIRES_VALID``: on by default."""

from __future__ import annotations

import pytest

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError


def test_publishing_requires_valid_metadata_unless_turned_off() -> None:
    assert Settings.from_env({}).publish_requires_valid is True
    assert (
        Settings.from_env({"ZARRCHIVE_PUBLISH_REQUIRES_VALID": "false"}).publish_requires_valid
        is False
    )
    assert (
        Settings.from_env({"ZARRCHIVE_PUBLISH_REQUIRES_VALID": "TRUE"}).publish_requires_valid
        is True
    )
    with pytest.raises(ConfigurationError, match="PUBLISH_REQUIRES_VALID"):
        Settings.from_env({"ZARRCHIVE_PUBLISH_REQUIRES_VALID": "maybe"})
