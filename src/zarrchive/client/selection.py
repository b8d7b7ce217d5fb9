"""Which files of a local Zarr an upload looks at: ``--include`` / ``--exclude`` globs (pure).

The rules (also in ``zarrchive upload --help`` and the README):

- A pattern is matched against a file's path relative to the Zarr root, ``/``-separated
  (``arr/0/.zattrs``), never against an absolute path; it may not start with ``/`` and has
  no empty, ``.`` or ``..`` segment and no backslash.  Matching is case-sensitive.
- A segment ``**`` matches zero or more whole segments (any depth); ``**`` must be a whole
  segment.  Within a segment, ``*`` matches any run of characters (never ``/``), ``?`` one
  character, ``[abc]``, ``[a-z]`` and ``[!abc]`` one character of (or not of) a set.
- A pattern selects a file when it matches the file's path *or the path of a directory
  holding it*: ``arr/0`` selects every file below ``arr/0``, as ``arr/0/**`` does.  A
  trailing ``/`` is ignored.
- A file is selected when (no ``--include`` is given, or some include selects it) and no
  ``--exclude`` selects it.

Examples: ``**/.zattrs`` (every ``.zattrs``), ``**/zarr.json``, ``arr/0/**`` (one subtree),
``*.json`` (JSON files at the root only: ``*`` never crosses ``/``).

The walk asks a :class:`DirectorySelection` per directory, from :meth:`Selection.root` down
through :meth:`DirectorySelection.child`: :attr:`~DirectorySelection.prune` says that no file
below can be selected (the walk skips the directory without listing it),
:attr:`~DirectorySelection.everything` that every file below is, and
:meth:`~DirectorySelection.selects` decides one file of the directory by its name (a set
lookup for literal names: a walk that lists 10^5 chunk names to find the ``.zattrs`` among
them stays cheap).  Matching is a small automaton per pattern over the path's segments: a
directory's state is the set of pattern positions reachable after its path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import translate
from functools import cached_property

from zarrchive.errors import InvalidInput

#: ``**`` as a segment.
_ANY_DEPTH = "**"
_MAGIC = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class _Segment:
    """One segment of a pattern: ``**``, a literal name or a glob."""

    text: str
    any_depth: bool
    literal: str | None
    regex: re.Pattern[str] | None

    def matches(self, name: str) -> bool:
        if self.literal is not None:
            return name == self.literal
        assert self.regex is not None
        return self.regex.match(name) is not None


def _segment(text: str) -> _Segment:
    if text == _ANY_DEPTH:
        return _Segment(text, True, None, None)
    if _MAGIC.search(text) is None:
        return _Segment(text, False, text, None)
    return _Segment(text, False, None, re.compile(translate(text)))


@dataclass(frozen=True)
class Pattern:
    """A parsed ``--include``/``--exclude`` glob (see the module's rules)."""

    text: str
    segments: tuple[_Segment, ...]

    @classmethod
    def parse(cls, text: str, option: str = "--include") -> Pattern:
        """Parse *text*; :class:`InvalidInput` naming *option* for a pattern that can't be one."""
        if not isinstance(text, str) or not text:
            raise InvalidInput(f"{option}: the pattern is empty")
        if text.startswith("/"):
            raise InvalidInput(
                f"{option} {text!r}: patterns are relative to the Zarr root (no leading '/'), "
                "e.g. 'arr/0/**' or '**/.zattrs'"
            )
        if "\\" in text:
            raise InvalidInput(f"{option} {text!r}: separate directories with '/', not '\\'")
        if "\x00" in text:
            raise InvalidInput(f"{option} {text!r}: a pattern cannot contain a NUL character")
        body = text[:-1] if text.endswith("/") else text
        parts = body.split("/")
        for part in parts:
            if part == "":
                raise InvalidInput(f"{option} {text!r} has an empty segment ('//')")
            if part in (".", ".."):
                raise InvalidInput(
                    f"{option} {text!r} has a {part!r} segment: patterns are plain paths from "
                    "the Zarr root"
                )
            if _ANY_DEPTH in part and part != _ANY_DEPTH:
                raise InvalidInput(
                    f"{option} {text!r}: '**' must be a whole segment (as in '**/.zattrs' or "
                    "'arr/**'); within a segment use '*'"
                )
        return cls(text, tuple(_segment(p) for p in parts))

    def start(self) -> frozenset[int]:
        """The automaton's states at the Zarr root (before any segment)."""
        return self._closure((0,))

    def _closure(self, states: Iterable[int]) -> frozenset[int]:
        """*states* plus every position reachable by letting a ``**`` match nothing."""
        segments = self.segments
        out: set[int] = set()
        for p in states:
            while p not in out:
                out.add(p)
                if p < len(segments) and segments[p].any_depth:
                    p += 1
                else:
                    break
        return frozenset(out)

    def step(self, states: frozenset[int], name: str) -> frozenset[int]:
        """The states after one more segment *name*."""
        segments = self.segments
        moved: list[int] = []
        for p in states:
            if p < len(segments):
                segment = segments[p]
                if segment.any_depth:
                    moved.append(p)
                elif segment.matches(name):
                    moved.append(p + 1)
        return self._closure(moved) if moved else frozenset()

    def accepts(self, states: frozenset[int]) -> bool:
        """True if the path consumed so far matches the whole pattern."""
        return len(self.segments) in states

    def can_continue(self, states: frozenset[int]) -> bool:
        """True if some longer path could still match (a state before the end)."""
        end = len(self.segments)
        return any(p < end for p in states)

    def last_matchers(self, states: frozenset[int]) -> tuple[bool, frozenset[str], list[_Segment]]:
        """What one more segment must be for the pattern to accept it: ``(any name, literal
        names, glob segments)``."""
        end = len(self.segments)
        any_name = False
        literals: set[str] = set()
        globs: list[_Segment] = []
        for p in states:
            if p >= end:
                continue
            segment = self.segments[p]
            if segment.any_depth:
                if end in self._closure((p,)):
                    any_name = True
            elif end in self._closure((p + 1,)):
                if segment.literal is not None:
                    literals.add(segment.literal)
                else:
                    globs.append(segment)
        return any_name, frozenset(literals), globs


class _Matcher:
    """Does one more name complete any of a group of patterns (includes, or excludes)?"""

    __slots__ = ("any_name", "globs", "literals")

    def __init__(self, patterns: Sequence[Pattern], states: Sequence[frozenset[int]]) -> None:
        self.any_name = False
        literals: set[str] = set()
        self.globs: list[_Segment] = []
        for pattern, state in zip(patterns, states, strict=True):
            any_name, found, globs = pattern.last_matchers(state)
            self.any_name = self.any_name or any_name
            literals |= found
            self.globs.extend(globs)
        self.literals = frozenset(literals)

    def __call__(self, name: str) -> bool:
        return self.any_name or name in self.literals or any(g.matches(name) for g in self.globs)


class DirectorySelection:
    """The selection seen from one directory of the Zarr (see :meth:`Selection.root`)."""

    def __init__(
        self,
        selection: Selection,
        path: str,
        include_states: tuple[frozenset[int], ...],
        exclude_states: tuple[frozenset[int], ...],
        included: bool,
        excluded: bool,
    ) -> None:
        self.selection = selection
        #: The directory's path (``""``: the root).
        self.path = path
        self._include_states = include_states
        self._exclude_states = exclude_states
        #: An include matched this directory or one above it (or there is no include).
        self._included = included
        #: An exclude matched this directory or one above it.
        self._excluded = excluded

    @cached_property
    def prune(self) -> bool:
        """No file below this directory can be selected: the walk need not enter it."""
        if self._excluded:
            return True
        if self._included:
            return False
        return not any(
            p.can_continue(s)
            for p, s in zip(self.selection.includes, self._include_states, strict=True)
        )

    @cached_property
    def everything(self) -> bool:
        """Every file below this directory is selected (no per-file check needed)."""
        if not self._included or self._excluded:
            return False
        return not any(
            p.can_continue(s)
            for p, s in zip(self.selection.excludes, self._exclude_states, strict=True)
        )

    def child(self, name: str) -> DirectorySelection:
        """The selection from the subdirectory *name*."""
        selection = self.selection
        include_states = tuple(
            p.step(s, name) for p, s in zip(selection.includes, self._include_states, strict=True)
        )
        exclude_states = tuple(
            p.step(s, name) for p, s in zip(selection.excludes, self._exclude_states, strict=True)
        )
        included = self._included or any(
            p.accepts(s) for p, s in zip(selection.includes, include_states, strict=True)
        )
        excluded = self._excluded or any(
            p.accepts(s) for p, s in zip(selection.excludes, exclude_states, strict=True)
        )
        path = f"{self.path}/{name}" if self.path else name
        return DirectorySelection(
            selection, path, include_states, exclude_states, included, excluded
        )

    @cached_property
    def _include_matcher(self) -> _Matcher:
        return _Matcher(self.selection.includes, self._include_states)

    @cached_property
    def _exclude_matcher(self) -> _Matcher:
        return _Matcher(self.selection.excludes, self._exclude_states)

    def selects(self, name: str) -> bool:
        """True if the file *name* of this directory is selected."""
        if self._excluded:
            return False
        if not self._included and not self._include_matcher(name):
            return False
        return not (self.selection.excludes and self._exclude_matcher(name))


@dataclass(frozen=True)
class Selection:
    """The files chosen by ``--include`` and ``--exclude`` patterns (none: every file)."""

    includes: tuple[Pattern, ...] = ()
    excludes: tuple[Pattern, ...] = ()

    @classmethod
    def parse(cls, includes: Iterable[str] = (), excludes: Iterable[str] = ()) -> Selection:
        return cls(
            tuple(Pattern.parse(p, "--include") for p in includes),
            tuple(Pattern.parse(p, "--exclude") for p in excludes),
        )

    @property
    def is_everything(self) -> bool:
        """No pattern: every file is selected."""
        return not self.includes and not self.excludes

    def root(self) -> DirectorySelection:
        """The selection from the Zarr's root directory."""
        include_states = tuple(p.start() for p in self.includes)
        exclude_states = tuple(p.start() for p in self.excludes)
        included = not self.includes or any(
            p.accepts(s) for p, s in zip(self.includes, include_states, strict=True)
        )
        excluded = any(p.accepts(s) for p, s in zip(self.excludes, exclude_states, strict=True))
        return DirectorySelection(self, "", include_states, exclude_states, included, excluded)

    def directory(self, path: str) -> DirectorySelection:
        """The selection from the directory *path* (``""``: the root)."""
        node = self.root()
        for name in path.split("/") if path else ():
            node = node.child(name)
        return node

    def selects(self, path: str) -> bool:
        """True if the file at *path* (relative to the Zarr root) is selected."""
        directory, _, name = path.rpartition("/")
        return self.directory(directory).selects(name)

    def describe(self) -> str:
        """The patterns as the user gave them, for messages."""
        words = [f"--include {p.text!r}" for p in self.includes]
        words += [f"--exclude {p.text!r}" for p in self.excludes]
        return " ".join(words) if words else "every file"


__all__ = ["DirectorySelection", "Pattern", "Selection"]
