"""Full-text search of dandisets: name, description, keywords, contributors' names and the
paths of the draft's assets (PostgreSQL full-text search; SQLite FTS5).

Two indexes, kept in the transaction of each change (never out of date): one document per
dandiset (name, description with keywords, contributors; weighted in that order) and one
per draft asset (its path).  Text is reduced to lower-case words (letters and digits) by
:func:`words` on both sides, so both databases match alike: a dandiset matches when every
word of the query begins a word of its document, or of one of its assets' paths.  Ranked
by the document's score (PostgreSQL ``ts_rank``, SQLite ``bm25``); dandisets found by an
asset path only come after, by identifier.

The index tables are the database's own kind (a ``tsvector`` table with GIN indexes, FTS5
virtual tables), created by migration 0010 and used through SQL here; they are not models.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

#: The tables of the search index (excluded from the models' comparison).
SEARCH_TABLES = ("search_dandisets", "search_assets")
#: Words of a query used (the rest is ignored).
MAX_QUERY_WORDS = 10
#: Characters of a document indexed per field (a hostile description is cut).
MAX_FIELD = 100_000
_WORD = re.compile(r"\w+", re.UNICODE)


def words(value: str) -> list[str]:
    """The lower-case words (letters, digits, ``_`` split too) of *value*."""
    return [w for w in _WORD.findall(value.lower().replace("_", " ")) if w]


def _text(value: Any) -> str:
    return " ".join(words(value if isinstance(value, str) else ""))[:MAX_FIELD]


def document(metadata: dict[str, Any], name: str) -> tuple[str, str, str]:
    """``(name, description and keywords, contributors' names)`` of a draft's metadata."""
    keywords = metadata.get("keywords")
    listed = (
        " ".join(k for k in keywords if isinstance(k, str)) if isinstance(keywords, list) else ""
    )
    contributors = metadata.get("contributor")
    names = (
        " ".join(
            str(c.get("name"))
            for c in contributors
            if isinstance(c, dict) and isinstance(c.get("name"), str)
        )
        if isinstance(contributors, list)
        else ""
    )
    description = f"{_text(metadata.get('description'))} {_text(listed)}".strip()
    return _text(name), description, _text(names)


def _postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _asset_rowid(asset_id: str) -> int:
    """The FTS5 rowid of an asset: 63 bits of its UUID."""
    return int.from_bytes(uuid.UUID(asset_id).bytes[:8], "big", signed=True)


def index_dandiset(session: Session, dandiset_id: int, name: str, metadata: dict[str, Any]) -> None:
    """(Re)index a dandiset's draft metadata, in the caller's transaction."""
    title, description, contributors = document(metadata, name)
    values = {"id": dandiset_id, "n": title, "d": description, "c": contributors}
    if _postgres(session):
        session.execute(
            text(
                "INSERT INTO search_dandisets (dandiset_id, document) VALUES (:id, "
                "setweight(to_tsvector('simple', :n), 'A') || "
                "setweight(to_tsvector('simple', :d), 'B') || "
                "setweight(to_tsvector('simple', :c), 'C')) "
                "ON CONFLICT (dandiset_id) DO UPDATE SET document = EXCLUDED.document"
            ),
            values,
        )
        return
    session.execute(text("DELETE FROM search_dandisets WHERE rowid = :id"), values)
    session.execute(
        text(
            "INSERT INTO search_dandisets (rowid, name, description, contributors) "
            "VALUES (:id, :n, :d, :c)"
        ),
        values,
    )


def index_asset(session: Session, dandiset_id: int, asset_id: str, path: str) -> None:
    """(Re)index a draft asset's path."""
    values = {"a": asset_id, "r": _asset_rowid(asset_id), "id": dandiset_id, "p": _text(path)}
    if _postgres(session):
        session.execute(
            text(
                "INSERT INTO search_assets (asset_id, dandiset_id, document) VALUES "
                "(:a, :id, to_tsvector('simple', :p)) ON CONFLICT (asset_id) DO UPDATE "
                "SET document = EXCLUDED.document"
            ),
            values,
        )
        return
    session.execute(text("DELETE FROM search_assets WHERE rowid = :r"), values)
    session.execute(
        text("INSERT INTO search_assets (rowid, path, dandiset_id) VALUES (:r, :p, :id)"), values
    )


def unindex_asset(session: Session, asset_id: str) -> None:
    if _postgres(session):
        session.execute(text("DELETE FROM search_assets WHERE asset_id = :a"), {"a": asset_id})
    else:
        session.execute(
            text("DELETE FROM search_assets WHERE rowid = :r"), {"r": _asset_rowid(asset_id)}
        )


def unindex_dandiset(session: Session, dandiset_id: int) -> None:
    session.execute(text("DELETE FROM search_assets WHERE dandiset_id = :id"), {"id": dandiset_id})
    column = "dandiset_id" if _postgres(session) else "rowid"
    session.execute(text(f"DELETE FROM search_dandisets WHERE {column} = :id"), {"id": dandiset_id})


def _query_words(query: str) -> list[str]:
    return words(query)[:MAX_QUERY_WORDS]


def matches(session: Session, query: str) -> dict[int, float]:
    """``dandiset id -> rank`` (higher first) of the dandisets matching *query*: by their
    document (ranks > 0), else by an asset path (rank 0)."""
    found = _query_words(query)
    if not found:
        return {}
    ranks: dict[int, float] = {}
    if _postgres(session):
        tsquery = " & ".join(f"{w}:*" for w in found)
        for dandiset_id, rank in session.execute(
            text(
                "SELECT dandiset_id, ts_rank(document, to_tsquery('simple', :q)) "
                "FROM search_dandisets WHERE document @@ to_tsquery('simple', :q)"
            ),
            {"q": tsquery},
        ):
            ranks[int(dandiset_id)] = 1.0 + float(rank)
        paths = session.execute(
            text(
                "SELECT DISTINCT dandiset_id FROM search_assets "
                "WHERE document @@ to_tsquery('simple', :q)"
            ),
            {"q": tsquery},
        )
    else:
        fts = " AND ".join(f'"{w}"*' for w in found)
        for dandiset_id, score in session.execute(
            text(
                "SELECT rowid, bm25(search_dandisets, 10.0, 4.0, 2.0) FROM search_dandisets "
                "WHERE search_dandisets MATCH :q"
            ),
            {"q": fts},
        ):
            ranks[int(dandiset_id)] = 1.0 - float(score)  # bm25: lower is better, negative
        paths = session.execute(
            text("SELECT DISTINCT dandiset_id FROM search_assets WHERE search_assets MATCH :q"),
            {"q": fts},
        )
    for (dandiset_id,) in paths:
        ranks.setdefault(int(dandiset_id), 0.0)
    return ranks


def ranked(ids: Iterable[int], ranks: dict[int, float]) -> list[int]:
    """*ids* by rank (highest first), then identifier."""
    return sorted(ids, key=lambda i: (-ranks.get(i, 0.0), i))
