"""The import graph of a package's modules, read from their source with :mod:`ast`.

Every import counts, wherever it is written: at the top of a module, inside a function
(a function-level import is as much a dependency as any other, only deferred), and under
``if TYPE_CHECKING:`` (a dependency of the design that mypy follows, even if Python never
runs it).  An edge goes from the importing module to the module imported:

- ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module: to ``a.b.c``;
- ``from a.b import name`` where ``name`` is not a module: to ``a.b``;
- relative imports (``from . import x``, ``from ..y import z``) resolved the same way.

The parent packages a submodule's import loads implicitly (``a`` and ``a.b`` for
``a.b.c``) are not edges: the package ``__init__`` is a module of its own, which may import
its submodules.

A *private import* is ``from a.b import _name`` of a name with a leading underscore (not a
dunder) from another module; importing a private *module* (``a.b._m``) counts only from
outside its package ``a.b``, whose modules share it.

Pure: :func:`import_graph` reads nothing but the sources it is given; :func:`read_sources`
reads the ``.py`` files under a directory.  ``tests/test_import_graph.py`` holds the
package to it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, order=True)
class PrivateImport:
    """*importer* imports the private *name* (a name, or a module) of *module*."""

    importer: str
    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.importer} imports {self.name} from {self.module}"


@dataclass(frozen=True)
class ImportGraph:
    """The modules of a package, their imports of each other, and the private imports."""

    #: every module's imports of modules of the package (names as Python spells them)
    edges: Mapping[str, frozenset[str]]
    private_imports: tuple[PrivateImport, ...]

    @property
    def modules(self) -> frozenset[str]:
        return frozenset(self.edges)

    def cycles(self) -> list[frozenset[str]]:
        """The import cycles: every strongly connected component of more than one module
        (each sorted list of modules imports, directly or not, every other), in a stable
        order."""
        return sorted(
            (frozenset(c) for c in _strongly_connected(self.edges) if len(c) > 1),
            key=sorted,
        )


def module_name(root: Path, path: Path) -> str:
    """The dotted name of the module at *path* below the source directory *root*
    (``root/a/b/__init__.py`` is ``a.b``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_sources(root: Path, package: str) -> dict[str, str]:
    """The source of every module of *package* (a directory below *root*), by name."""
    return {
        module_name(root, path): path.read_text(encoding="utf-8")
        for path in sorted((root / package.replace(".", "/")).rglob("*.py"))
    }


def import_graph(sources: Mapping[str, str], packages: Iterable[str] = ()) -> ImportGraph:
    """The graph of the modules *sources* holds (dotted name to source text).

    *packages* names the modules that are packages (their ``__init__``), for relative
    imports; a module with submodules among *sources* is one anyway."""
    modules = frozenset(sources)
    is_package = set(packages) | {m.rpartition(".")[0] for m in modules if "." in m}
    edges: dict[str, frozenset[str]] = {}
    private: set[PrivateImport] = set()
    for importer, text in sources.items():
        found: set[str] = set()
        for target, name in _imports(ast.parse(text), importer, importer in is_package):
            module, private_name = _resolve(target, name, modules)
            if module is None:
                continue  # not of the package
            if module != importer:
                found.add(module)
            if private_name is not None and module != importer:
                private.add(PrivateImport(importer, module, private_name))
            if name is None or module == f"{target}.{name}":
                # a module imported: private when its own name is, from outside its package
                leaf_package, _, leaf = module.rpartition(".")
                if _is_private(leaf) and not _within(importer, leaf_package):
                    private.add(PrivateImport(importer, leaf_package, leaf))
        edges[importer] = frozenset(found)
    return ImportGraph(edges, tuple(sorted(private)))


def _imports(tree: ast.Module, importer: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
    """``(module, name)`` of every import in *tree*: ``name`` None for ``import module``."""
    package = importer if is_package else importer.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            for alias in node.names:
                if alias.name != "*":
                    yield base, alias.name


def _resolve(
    target: str, name: str | None, modules: frozenset[str]
) -> tuple[str | None, str | None]:
    """The module of the package an import reaches (None: none) and the private name it
    takes from it, if any."""
    if name is not None:
        if f"{target}.{name}" in modules:
            return f"{target}.{name}", None
        if target in modules:
            return target, name if _is_private(name) else None
        return None, None
    parts = target.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return (".".join(parts) if parts else None), None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _strongly_connected(edges: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of *edges* (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components
