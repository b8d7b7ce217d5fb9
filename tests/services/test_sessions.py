"""No ORM object is used after its session closed (the convention of :mod:`zarrchive.services`).

Three checks catch a regression:

- by their annotations, the service functions that take the archive but no session (they
  open sessions of their own) take and return no ORM type, not even inside the dataclasses
  they answer;
- no code expunges an object from its session (the way to smuggle one out that strict
  sessions cannot see);
- the tests' archives are strict (``ZARRCHIVE_STRICT_SESSIONS``): their objects expire when
  their session commits, so any use after it, anywhere in the suite, raises
  :class:`~sqlalchemy.orm.exc.DetachedInstanceError` instead of reading stale values.

And the web pages read through the services only: no SQLAlchemy, no models in ``web/``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import DetachedInstanceError

import zarrchive
import zarrchive.services
from zarrchive.db.models import Base, Zarr
from zarrchive.db.session import Database
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.zarrs import ZarrRef

SOURCES = Path(zarrchive.__file__).parent


def _service_functions() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every function defined in a module of :mod:`zarrchive.services` (and its packages),
    private ones too."""
    for found in pkgutil.walk_packages(zarrchive.services.__path__, "zarrchive.services."):
        module = importlib.import_module(found.name)
        for name, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module.__name__:
                yield f"{module.__name__}.{name}", value


def _orm_types(hint: Any, seen: set[Any]) -> set[type]:
    """The ORM classes *hint* names, in unions, generics (a ``Callable``'s parameters
    included) and the fields of dataclasses."""
    if isinstance(hint, list | tuple):  # Callable[[A, B], R]'s parameter list
        found_in: set[type] = set()
        for item in hint:
            found_in |= _orm_types(item, seen)
        return found_in
    if hint in seen:
        return set()
    seen.add(hint)
    if isinstance(hint, type) and issubclass(hint, Base):
        return {hint}
    found: set[type] = set()
    for argument in typing.get_args(hint):
        found |= _orm_types(argument, seen)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        for field_hint in typing.get_type_hints(hint).values():
            found |= _orm_types(field_hint, seen)
    return found


def _archive_level() -> list[tuple[str, dict[str, Any]]]:
    """``(name, hints)`` of the service functions that take the archive but no session."""
    result = []
    for name, function in _service_functions():
        hints = typing.get_type_hints(function)
        parameters = [hint for key, hint in hints.items() if key != "return"]
        if Archive in parameters and Session not in parameters:
            result.append((name, hints))
    return result


def test_archive_level_services_take_and_return_plain_values() -> None:
    checked = _archive_level()
    names = {name for name, _ in checked}
    # the check sees the functions it is about
    assert {
        "zarrchive.services.zarr_engine.uploads.batches.delete_files",
        "zarrchive.services.dandi.embargo.start_unembargo",
        "zarrchive.services.zarr_engine.zarrs.browse",
        "zarrchive.services.views.catalog.asset_tree",
        "zarrchive.services.identity.auth.authenticate",
    } <= names
    leaks = {
        name: sorted(t.__name__ for t in _orm_types(hint, set()))
        for name, hints in checked
        for hint in hints.values()
        if _orm_types(hint, set())
    }
    assert leaks == {}, "archive-level services take or return ORM objects"


@dataclasses.dataclass(frozen=True)
class _Wrapped:
    rows: list[Zarr]


def test_the_annotation_check_sees_orm_types() -> None:
    assert _orm_types(Zarr | None, set()) == {Zarr}
    assert _orm_types(tuple[ZarrRef, list[Zarr]], set()) == {Zarr}
    assert _orm_types(_Wrapped, set()) == {Zarr}
    assert _orm_types(ZarrRef, set()) == set()


def test_nothing_expunges_objects_from_their_session() -> None:
    calls = []
    for path in sorted(SOURCES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("expunge", "expunge_all", "make_transient")
            ):
                calls.append(f"{path.relative_to(SOURCES)}:{node.lineno}")
    assert calls == [], "an object taken out of its session: answer a dataclass instead"


def _imports(package: str) -> list[tuple[str, str]]:
    """``(file, imported module)`` of every import in *package* (a directory of ``src``)."""
    found: list[tuple[str, str]] = []
    for path in sorted((SOURCES / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(path.name, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.append((path.name, node.module))
    return found


def test_the_web_package_reads_through_services() -> None:
    """The pages are a face of the services beside the API: no SQL of their own, and nothing
    of the API's (what both share lives below both, in ``http_common``)."""
    imports = [
        f"{file}: {name}"
        for file, name in _imports("web")
        if name.split(".")[0] == "sqlalchemy" or name.startswith(("zarrchive.db", "zarrchive.api"))
    ]
    assert imports == []


def test_what_both_faces_share_imports_neither() -> None:
    imports = [
        f"{file}: {name}"
        for file, name in _imports("http_common")
        if name.startswith(("zarrchive.api", "zarrchive.web"))
    ]
    assert imports == []


@pytest.mark.parametrize("strict", [True, False])
def test_strict_sessions_refuse_objects_after_their_session(tmp_path: Path, strict: bool) -> None:
    db = Database(f"sqlite:///{tmp_path / 'strict.sqlite3'}", strict=strict)
    try:
        db.migrate()
        with db.write_session() as session:
            user, _token = create_user(session, "someone")
        if strict:
            with pytest.raises(DetachedInstanceError):
                _ = user.username
        else:  # what a lenient session hides: a stale copy, readable anywhere
            assert user.username == "someone"
    finally:
        db.dispose()


def test_the_tests_archives_are_strict(archive: Archive) -> None:
    """Every test that uses the ``archive`` fixture (and the servers it backs) runs strict."""
    assert archive.settings.strict_sessions and archive.db.strict
    with archive.db.write_session() as session:
        user, _token = create_user(session, "someone")
    with pytest.raises(DetachedInstanceError):
        _ = user.username
