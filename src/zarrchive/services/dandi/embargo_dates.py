"""Embargo end dates, pure: what a creation request may give (DANDI's rules) and how the
metadata shows it (DANDI's ``access[0].embargoedUntil``).  No I/O: the clock's day is an
argument (:func:`utc_today` is the real one)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from zarrchive.errors import InvalidInput

#: An embargo's longest span from its creation: DANDI's two years, five with an award
#: (``funding_source`` and ``award_number``); also the default end date.
EMBARGO_DAYS = 2 * 365
FUNDED_EMBARGO_DAYS = 5 * 365


def utc_today() -> date:
    return datetime.now(UTC).date()


def embargo_end_date(
    given: str | None, *, embargoed: bool, funded: bool = False, today: date
) -> date | None:
    """The end date of a dandiset created (*embargoed* or not) with *given*
    (``YYYY-MM-DD``; ``None``: two years from *today*, as DANDI): after *today*, at most
    :data:`EMBARGO_DAYS` on (:data:`FUNDED_EMBARGO_DAYS` with an award).  Raises
    :class:`InvalidInput` for a malformed date, a day not after *today*, one too far, or a
    date for a dandiset that is not embargoed."""
    if given is None:
        return today + timedelta(days=EMBARGO_DAYS) if embargoed else None
    if not embargoed:
        raise InvalidInput(
            "embargo_end_date is the end of an embargo: create the dandiset with embargo=true, "
            "or leave the date out"
        )
    try:
        end = date.fromisoformat(given) if len(given) == 10 else None
    except ValueError:
        end = None
    if end is None:
        raise InvalidInput(
            f"embargo_end_date {given[:40]!r} is not a date: give it as YYYY-MM-DD "
            "(e.g. 2027-06-30)"
        )
    if end <= today:
        raise InvalidInput(
            f"embargo_end_date {end.isoformat()} is not after today ({today.isoformat()}, UTC): "
            "give a later day, or create the dandiset open"
        )
    longest = FUNDED_EMBARGO_DAYS if funded else EMBARGO_DAYS
    if end > today + timedelta(days=longest):
        raise InvalidInput(
            f"embargo_end_date {end.isoformat()} is more than {longest // 365} years away: the "
            f"latest is {(today + timedelta(days=longest)).isoformat()}"
            + ("" if funded else " (five years with funding_source and award_number)")
        )
    return end


def embargo_access(embargoed: bool, end: date | None) -> list[dict[str, str]]:
    """DANDI's ``access`` of a dandiset's metadata: its status and end date."""
    entry = {
        "schemaKey": "AccessRequirements",
        "status": "dandi:EmbargoedAccess" if embargoed else "dandi:OpenAccess",
    }
    if end is not None:
        entry["embargoedUntil"] = end.isoformat()
    return [entry]


def funder(source: str | None, award: str | None) -> tuple[str, str] | None:
    """DANDI's ``funding_source`` and ``award_number``: both or neither (an empty one is
    none); raises :class:`InvalidInput` for one without the other."""
    source, award = (source or "").strip() or None, (award or "").strip() or None
    if source is None and award is None:
        return None
    if source is None or award is None:
        missing = "award_number" if award is None else "funding_source"
        raise InvalidInput(
            f"{missing} is required with {'funding_source' if award is None else 'award_number'}"
            ": give both (an award allows an embargo of up to five years) or neither"
        )
    return source, award
