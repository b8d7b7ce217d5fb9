"""The pure side of DOIs (:mod:`zarrchive.services.dandi.doi_metadata`): names, the steps from a
state to a goal (against a model of DataCite's state rules), the documents."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.db.models import DoiGoal, DoiState
from zarrchive.services.dandi import doi_metadata as dm

#: DataCite's rules: the states an event is allowed from, and where it leads
EVENTS = {
    "publish": ({"draft", "registered", "findable"}, "findable"),
    "hide": ({"findable", "registered"}, "registered"),
}


def datacite(remote: str | None, step: dm.DoiStep) -> str | None:
    """Where DataCite's DOI (``None``: it has none) is after *step*; AssertionError for a call
    DataCite refuses."""
    if step.method is dm.DoiMethod.DELETE:
        assert remote in (None, "draft"), f"DataCite never deletes a {remote} DOI"
        return None
    state = "draft" if remote is None else remote
    if step.event is not None:
        allowed, target = EVENTS[step.event.value]
        assert state in allowed, f"{step.event} from {state}"
        state = target
    return state


@given(
    st.sampled_from([s for s in DoiState if s is not DoiState.DELETED]),
    st.sampled_from(list(DoiGoal)),
    st.booleans(),
)
def test_steps_reach_the_goal_and_follow_datacites_rules(
    state: DoiState, goal: DoiGoal, publish: bool
) -> None:
    remote = None if state is DoiState.PENDING else state.value
    for _ in range(3):
        step = dm.next_step(state, goal, publish=publish)
        if step is None:
            break
        if step.method is dm.DoiMethod.DELETE and remote not in (None, "draft"):
            # the job asks DataCite first: a Findable DOI is hidden instead
            step = dm.DoiStep(dm.DoiMethod.UPDATE, dm.DoiEvent.HIDE, DoiState.REGISTERED, False)
        remote = datacite(remote, step)
        if step.method is not dm.DoiMethod.DELETE:
            assert remote == step.then.value
        state = step.then
    else:
        pytest.fail(f"no fixed point from {state} to {goal}")
    if goal is DoiGoal.GONE:
        assert remote in (None, "registered")
    elif goal is DoiGoal.FINDABLE and publish:
        assert remote == "findable"
    else:
        assert remote is not None  # it exists: Draft, or where DataCite keeps it
    assert dm.resend_step(state, goal, publish=publish) is None or goal is not DoiGoal.GONE


@given(st.from_regex(r"10\.[0-9]{4,9}", fullmatch=True), st.integers(0, 999_999))
def test_names(prefix: str, number: int) -> None:
    identifier = f"{number:06d}"
    concept = dm.dandiset_doi(prefix, "DANDI", identifier)
    assert concept == f"{prefix}/dandi.{identifier}"
    assert dm.version_doi(prefix, "DANDI", identifier, "0.230101.1200") == (
        f"{concept}/0.230101.1200"
    )
    for bad in ("draft", "0.1", "../x"):
        with pytest.raises(ValueError):
            dm.version_doi(prefix, "DANDI", identifier, bad)


def test_attributes_relate_the_dois_and_drop_what_kernel_4_has_not() -> None:
    person = {"name": "Doe, Jane", "creatorName": "Doe, Jane", "schemeUri": "orcid.org"}
    converted: dict[str, Any] = {
        "data": {
            "attributes": {
                "doi": "x",
                "version": "0.230101.1200",
                "creators": [person],
                "event": "publish",
                "relatedIdentifiers": [
                    {
                        "relatedIdentifier": "10.1/c",
                        "relatedIdentifierType": "DOI",
                        "relationType": "IsVersionOf",
                    }
                ],
            }
        }
    }
    version = dm.version_attributes(
        converted, doi="10.1/c/1.2.3", dandiset_doi="10.1/c", event=None
    )
    assert version["doi"] == "10.1/c/1.2.3" and "event" not in version
    assert version["creators"] == [{"name": "Doe, Jane"}]
    assert len(version["relatedIdentifiers"]) == 1  # never twice
    concept = dm.dandiset_attributes(
        converted,
        doi="10.1/c",
        url="http://a/dandiset/1",
        version_dois=["10.1/c/1.2.3"],
        event=None,
    )
    assert "version" not in concept and concept["url"] == "http://a/dandiset/1"
    assert {
        "relatedIdentifier": "10.1/c/1.2.3",
        "relatedIdentifierType": "DOI",
        "relationType": "HasVersion",
    } in concept["relatedIdentifiers"]
    assert converted["data"]["attributes"]["creators"][0]["creatorName"]  # not changed


@given(st.lists(st.fixed_dictionaries({"source": st.text(), "title": st.text()}), max_size=5))
def test_datacite_errors_are_read_and_bounded(errors: list[dict[str, str]]) -> None:
    message = dm.datacite_errors({"errors": errors})
    if any(e["title"].strip() for e in errors):
        assert message is not None and len(message) <= dm.ERROR_LIMIT
    else:
        assert message is None
    assert dm.datacite_errors("<html>") is None


def test_the_archive_checks_kernel_4_before_sending() -> None:
    """A payload DataCite's schema refuses is named before any call (a refusal the archive
    records without asking DataCite)."""
    valid: dict[str, Any] = {
        "doi": "10.1/c/1",
        "url": "http://a/dandiset/1/1",
        "event": "publish",
        "creators": [{"name": "Doe, Jane", "nameType": "Personal"}],
        "titles": [{"title": "A"}],
        "publisher": {"name": "DANDI Archive"},
        "publicationYear": "2026",
        "types": {"resourceTypeGeneral": "Dataset", "resourceType": "Neural Data"},
        "schemaVersion": "http://datacite.org/schema/kernel-4",
    }
    assert dm.needs_full_metadata(valid)
    assert dm.kernel_4_errors(valid) is None
    assert "creators/0" in (dm.kernel_4_errors({**valid, "creators": [{"nom": "D"}]}) or "")
    assert "titles" in (dm.kernel_4_errors({**valid, "titles": "A"}) or "")
    assert not dm.needs_full_metadata({"doi": "10.1/c", "url": "http://a", "titles": []})
