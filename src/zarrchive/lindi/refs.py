"""The LINDI reference file system (pure): ``{"version": 1, "refs": {...}}``.

Each value of ``refs`` is one of

- a JSON object: the content of a metadata file (``.zgroup``, ``.zarray``, ``.zattrs``);
- a string: inline content, UTF-8 text or ``"base64:"`` followed by base64;
- ``[url, offset, size]``: a byte range of another file (a local path, a path
  ``./relative`` to the reference file, or an http(s) URL), where ``url`` may be
  a template ``{{name}}`` defined in the top-level ``templates`` object.

An optional ``generationMetadata`` object describes how the file was made.
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from zarrchive.errors import InvalidLindiFile

BASE64_PREFIX = "base64:"
META_NAMES = (".zgroup", ".zarray", ".zattrs")
_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: A URL used at least this many times becomes a ``{{uN}}`` template.
TEMPLATE_MIN_COUNT = 5


class ByteRange(NamedTuple):
    """``[url, offset, size]``: *size* bytes at *offset* of the file at *url*."""

    url: str
    offset: int
    size: int


def encode_inline(data: bytes) -> str:
    """Inline content as a string: ASCII text as is, anything else as ``base64:...``."""
    if not data.startswith(BASE64_PREFIX.encode()):
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            pass
        else:
            if text.isprintable() or all(c.isprintable() or c in "\n\t" for c in text):
                return text
    return BASE64_PREFIX + base64.b64encode(data).decode("ascii")


def decode_inline(value: str) -> bytes:
    """The bytes of inline content."""
    if value.startswith(BASE64_PREFIX):
        try:
            return base64.b64decode(value[len(BASE64_PREFIX) :], validate=True)
        except ValueError as exc:
            raise InvalidLindiFile(f"invalid base64 inline content {value[:40]!r}...") from exc
    return value.encode("utf-8")


def json_object(key: str, data: bytes) -> dict[str, Any]:
    """The JSON object stored at *key* (``.zarray``, ``.zattrs``, ...), checked."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise InvalidLindiFile(f"{key} is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidLindiFile(f"{key} must hold a JSON object")
    return obj


def meta_bytes(value: Mapping[str, Any]) -> bytes:
    """The bytes of a metadata file given as a JSON object."""
    return json.dumps(value, allow_nan=False, sort_keys=True).encode("utf-8")


def validate(obj: object) -> dict[str, Any]:
    """Check the structure of a reference file system and return it.

    Raises :class:`InvalidLindiFile` saying what is wrong.
    """
    if not isinstance(obj, dict):
        raise InvalidLindiFile("a LINDI file must be a JSON object with 'refs'")
    refs = obj.get("refs")
    if not isinstance(refs, dict):
        raise InvalidLindiFile("a LINDI file needs a 'refs' object")
    version = obj.get("version", 1)
    if version != 1:
        raise InvalidLindiFile(f"unsupported reference file system version {version!r}: expected 1")
    templates = obj.get("templates", {})
    if not isinstance(templates, dict) or not all(isinstance(v, str) for v in templates.values()):
        raise InvalidLindiFile("'templates' must map names to URL strings")
    for key, value in refs.items():
        if not isinstance(key, str) or key.startswith("/"):
            raise InvalidLindiFile(f"invalid key {key!r}: keys are relative '/'-separated paths")
        if isinstance(value, str | dict):
            continue
        if (
            isinstance(value, list)
            and len(value) == 3
            and isinstance(value[0], str)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value[1:])
        ):
            continue
        raise InvalidLindiFile(
            f"invalid value for {key!r}: expected a JSON object, a string or [url, offset, size]"
        )
    gen = obj.get("generationMetadata")
    if gen is not None and not isinstance(gen, dict):
        raise InvalidLindiFile("'generationMetadata' must be a JSON object")
    return obj


def expand_template(url: str, templates: Mapping[str, str]) -> str:
    """*url* with ``{{name}}`` replaced by the template's value."""
    if "{{" not in url:
        return url

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in templates:
            raise InvalidLindiFile(f"the URL {url!r} uses the undefined template {name!r}")
        return templates[name]

    return _TEMPLATE.sub(sub, url)


def is_remote(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def resolve_location(url: str, base: str | None) -> str:
    """A ``./relative`` location resolved against the directory of *base* (path or URL)."""
    if not url.startswith("./"):
        return url
    if base is None:
        raise InvalidLindiFile(
            f"the relative location {url!r} needs the LINDI file's own location: open it by path or URL"
        )
    if is_remote(base):
        return base.rsplit("/", 1)[0] + "/" + url[2:]
    return posixpath.join(posixpath.dirname(base) or ".", url[2:])


def byte_range(value: list[Any], templates: Mapping[str, str], base: str | None) -> ByteRange:
    url = resolve_location(expand_template(value[0], templates), base)
    return ByteRange(url, int(value[1]), int(value[2]))


def apply_templates(rfs: dict[str, Any], min_count: int = TEMPLATE_MIN_COUNT) -> dict[str, Any]:
    """A copy of *rfs* where URLs used *min_count* times or more are ``{{uN}}`` templates."""
    templates: dict[str, str] = dict(rfs.get("templates") or {})
    by_url = {v: k for k, v in templates.items()}
    counts: dict[str, int] = {}
    for value in rfs["refs"].values():
        if isinstance(value, list) and "{{" not in value[0]:
            counts[value[0]] = counts.get(value[0], 0) + 1
    for url in sorted(u for u, n in counts.items() if n >= min_count):
        if url in by_url:
            continue
        i = 1
        while f"u{i}" in templates:
            i += 1
        templates[f"u{i}"] = url
        by_url[url] = f"u{i}"
    refs: dict[str, Any] = {}
    for key, value in rfs["refs"].items():
        if isinstance(value, list) and value[0] in by_url:
            refs[key] = ["{{" + by_url[value[0]] + "}}", value[1], value[2]]
        else:
            refs[key] = value
    out = {k: v for k, v in rfs.items() if k not in ("refs", "templates")}
    out["refs"] = refs
    if templates:
        out["templates"] = templates
    return out


def split_key(key: str) -> tuple[str, str]:
    """``(parent, name)`` of a key (``""`` is the root)."""
    parent, _, name = key.rpartition("/")
    return parent, name


def node_index(keys: Iterable[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The nodes of a Zarr v2 hierarchy given its keys.

    Returns ``(kinds, children)``: ``kinds[path]`` is ``"group"`` or ``"array"``
    (``""`` is the root), ``children[path]`` the sorted names of the child nodes.
    """
    kinds: dict[str, str] = {}
    for key in keys:
        parent, name = split_key(key)
        if name == ".zgroup":
            kinds.setdefault(parent, "group")
        elif name == ".zarray":
            kinds[parent] = "array"
    children: dict[str, list[str]] = {p: [] for p, k in kinds.items() if k == "group"}
    for path in kinds:
        if path == "":
            continue
        parent, name = split_key(path)
        if parent in children:
            children[parent].append(name)
    for names in children.values():
        names.sort()
    return kinds, children


def load_json_text(text: str | bytes, *, source: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InvalidLindiFile(f"{source} is not valid JSON: {exc}") from exc
    return validate(obj)
