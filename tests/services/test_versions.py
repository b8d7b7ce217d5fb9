"""Version metadata (``services.dandi.versions.contact_person``): the first contact person's name."""

from __future__ import annotations

from typing import Any

import pytest

from zarrchive.services.dandi.versions import contact_person

CONTACT = {"name": "Doe, Jane", "roleName": ["dcite:Author", "dcite:ContactPerson"]}


@pytest.mark.parametrize(
    ("metadata", "name"),
    [
        ({}, ""),
        ({"contributor": "not a list"}, ""),
        ({"contributor": [{"name": "Roe, Rick", "roleName": ["dcite:Author"]}]}, ""),
        ({"contributor": ["odd", {"name": "x", "roleName": None}, CONTACT]}, "Doe, Jane"),
        ({"contributor": [CONTACT, {**CONTACT, "name": "Second"}]}, "Doe, Jane"),
        ({"contributor": [{"roleName": ["dcite:ContactPerson"]}]}, ""),
    ],
)
def test_contact_person(metadata: dict[str, Any], name: str) -> None:
    assert contact_person(metadata) == name
