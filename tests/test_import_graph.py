"""The layering of ``src/zarrchive``: no import cycle among its modules, no private name
imported from another module (tests/helpers/import_graph.py says what counts: function-level
imports and ``TYPE_CHECKING`` imports do).

A cycle or a private import still being worked on is listed below, each with what ends
it; the lists only shrink (a listed one that no longer exists fails
:func:`test_the_allow_lists_name_only_what_remains`, so it is removed when it ends).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.import_graph import ImportGraph, PrivateImport, import_graph, read_sources

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src"

#: Import cycles still being ended (issue #40), each a set of modules: none left.
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()
#: Private names still imported across modules (issue #40): none left.
ALLOWED_PRIVATE_IMPORTS: frozenset[PrivateImport] = frozenset()


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return import_graph(read_sources(SRC, "zarrchive"))


def test_no_import_cycle(graph: ImportGraph) -> None:
    cycles = [sorted(c) for c in graph.cycles() if c not in ALLOWED_CYCLES]
    assert cycles == [], "import cycles (break each: a lower module, a protocol, a registry)"


def test_no_private_name_imported_across_modules(graph: ImportGraph) -> None:
    private = [str(p) for p in graph.private_imports if p not in ALLOWED_PRIVATE_IMPORTS]
    assert private == [], "make each a public, documented name (or keep it in its module)"


def test_the_allow_lists_name_only_what_remains(graph: ImportGraph) -> None:
    assert ALLOWED_CYCLES - set(graph.cycles()) == set(), "ended: remove it from ALLOWED_CYCLES"
    gone = ALLOWED_PRIVATE_IMPORTS - set(graph.private_imports)
    assert gone == set(), "ended: remove it from ALLOWED_PRIVATE_IMPORTS"


def test_the_graph_is_read_from_the_package(graph: ImportGraph) -> None:
    """The reading itself, on the real tree: modules found, edges where they must be."""
    assert {"zarrchive", "zarrchive.cli", "zarrchive.cli.registry"} <= graph.modules
    assert "zarrchive.cli.registry" in graph.edges["zarrchive.cli._app"]
    assert "zarrchive.cli._app" in graph.edges["zarrchive.cli"]  # a function-level import


# -- the reading, on made-up packages ----------------------------------------------------
def test_every_kind_of_import_is_an_edge() -> None:
    graph = import_graph(
        {
            "p": "",
            "p.a": "import p.b\nfrom p import c\nfrom p.d import thing\n",
            "p.b": "def f():\n    from p.e import g\n",
            "p.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import x\n",
            "p.d": "from . import e\nfrom .e import y\nimport os\n",
            "p.e": "",
            "p.sub": "",
            "p.sub.m": "from .. import a\nfrom ..e import z\n",
        }
    )
    assert graph.edges["p.a"] == {"p.b", "p.c", "p.d"}
    assert graph.edges["p.b"] == {"p.e"}  # function-level
    assert graph.edges["p.c"] == {"p.a"}  # TYPE_CHECKING
    assert graph.edges["p.d"] == {"p.e"}  # relative, in a module
    assert graph.edges["p.sub.m"] == {"p.a", "p.e"}  # relative, two levels up
    assert graph.cycles() == [frozenset({"p.a", "p.c"})]


def test_cycles_through_function_level_and_type_checking_imports() -> None:
    graph = import_graph(
        {
            "p": "",
            "p.x": "def f():\n    import p.y\n",
            "p.y": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.z import Z\n",
            "p.z": "from p.x import f\n",
            "p.solo": "from p.x import f\n",
        }
    )
    assert graph.cycles() == [frozenset({"p.x", "p.y", "p.z"})]


def test_a_package_importing_its_submodules_is_no_cycle() -> None:
    graph = import_graph({"p": "from p.a import thing\n", "p.a": "thing = 1\n"})
    assert graph.cycles() == []


def test_private_imports() -> None:
    graph = import_graph(
        {
            "p": "from p import _pkg\n",
            "p.a": "_own = 1\nfrom p.b import _hidden, public, __version__\n",
            "p.b": "_hidden = public = __version__ = 1\n",
            "p._pkg": "",
            "p._pkg._m": "",
            "p._pkg.c": "from p._pkg import _m\nfrom p._pkg._m import x\n",
            "q": "from p._pkg import _m\nimport p._pkg\n",
        }
    )
    assert [str(p) for p in graph.private_imports] == [
        "p.a imports _hidden from p.b",
        "q imports _pkg from p",
        "q imports _m from p._pkg",
    ]
