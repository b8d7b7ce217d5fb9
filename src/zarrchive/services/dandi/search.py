"""Full-text search of dandisets: name, description, keywords, contributors' names and the
paths of the draft's assets (PostgreSQL full-text search; SQLite FTS5).

Indexes kept in the transaction of each change (never out of date): one full-text document
per dandiset (name, description with keywords, contributors; weighted in that order), and
the words of its draft assets' paths, counted per dandiset (``search_path_words``, a B-tree
on the word: a prefix is a range; ``search_assets`` keeps each asset's words to undo them).
Text is reduced to lower-case words (letters and digits) by :func:`words` on both sides,
so both databases match alike: a dandiset matches when every word of the query begins a
word of its document, or begins a word of its assets' paths.  Ranked
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

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

#: The tables of the search index (excluded from the models' comparison).
SEARCH_TABLES = ("search_dandisets", "search_assets", "search_path_words")
#: The rank of a dandiset whose name merely contains the query (between those found by
#: their document, ranked above 1, and those found by an asset path, ranked 0).
NAME_SUBSTRING_RANK = 0.5
#: Words of a query used (the rest is ignored).
MAX_QUERY_WORDS = 10
#: Characters of a path word indexed (its column's width).
MAX_WORD = 200
#: Distinct words indexed per asset path.
MAX_PATH_WORDS = 64
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


def _path_words(path: str) -> list[str]:
    return sorted({w[:MAX_WORD] for w in words(path)})[:MAX_PATH_WORDS]


def _add_words(session: Session, dandiset_id: int, found: list[str], step: int) -> None:
    """Count *found* words *step* (+1/-1) more times among the dandiset's paths."""
    if not found:
        return
    values = [{"d": dandiset_id, "w": w} for w in found]
    if step > 0:
        session.execute(
            text(
                "INSERT INTO search_path_words (word, dandiset_id, uses) VALUES (:w, :d, 1) "
                "ON CONFLICT (word, dandiset_id) DO UPDATE SET uses = search_path_words.uses + 1"
            ),
            values,
        )
        return
    session.execute(
        text("UPDATE search_path_words SET uses = uses - 1 WHERE word = :w AND dandiset_id = :d"),
        values,
    )
    session.execute(
        text("DELETE FROM search_path_words WHERE dandiset_id = :d AND uses <= 0"),
        {"d": dandiset_id},
    )


def index_asset(session: Session, dandiset_id: int, asset_id: str, path: str) -> None:
    """(Re)index a draft asset's path: the words of the dandiset's paths, counted."""
    unindex_asset(session, asset_id)
    found = _path_words(path)
    session.execute(
        text("INSERT INTO search_assets (asset_id, dandiset_id, words) VALUES (:a, :d, :w)"),
        {"a": asset_id, "d": dandiset_id, "w": " ".join(found)},
    )
    _add_words(session, dandiset_id, found, +1)


def index_assets(session: Session | Connection, rows: list[tuple[int, str, str]]) -> None:
    """Index many new draft assets at once: ``(dandiset id, asset id, path)`` each."""
    if not rows:
        return
    session.execute(
        text("INSERT INTO search_assets (asset_id, dandiset_id, words) VALUES (:a, :d, :w)"),
        [{"a": a, "d": d, "w": " ".join(_path_words(p))} for d, a, p in rows],
    )
    counts: dict[tuple[str, int], int] = {}
    for d, _a, p in rows:
        for w in _path_words(p):
            counts[(w, d)] = counts.get((w, d), 0) + 1
    session.execute(
        text(
            "INSERT INTO search_path_words (word, dandiset_id, uses) VALUES (:w, :d, :n) "
            "ON CONFLICT (word, dandiset_id) DO UPDATE SET uses = search_path_words.uses + :n"
        ),
        [{"w": w, "d": d, "n": n} for (w, d), n in counts.items()],
    )


def unindex_asset(session: Session, asset_id: str) -> None:
    old = session.execute(
        text("SELECT dandiset_id, words FROM search_assets WHERE asset_id = :a"), {"a": asset_id}
    ).first()
    if old is None:
        return
    session.execute(text("DELETE FROM search_assets WHERE asset_id = :a"), {"a": asset_id})
    _add_words(session, int(old[0]), str(old[1]).split(), -1)


def unindex_dandiset(session: Session, dandiset_id: int) -> None:
    session.execute(text("DELETE FROM search_assets WHERE dandiset_id = :id"), {"id": dandiset_id})
    session.execute(
        text("DELETE FROM search_path_words WHERE dandiset_id = :id"), {"id": dandiset_id}
    )
    column = "dandiset_id" if _postgres(session) else "rowid"
    session.execute(text(f"DELETE FROM search_dandisets WHERE {column} = :id"), {"id": dandiset_id})


def _query_words(query: str) -> list[str]:
    return words(query)[:MAX_QUERY_WORDS]


def matches(session: Session, query: str) -> dict[int, float]:
    """``dandiset id -> rank`` (higher first) of the dandisets matching *query*: by their
    document (ranks > 0), else by an asset path (rank 0)."""
    found = [w[:MAX_WORD] for w in _query_words(query)]
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
        ).all():
            ranks[int(dandiset_id)] = 1.0 + float(rank)
    else:
        fts = " AND ".join(f'"{w}"*' for w in found)
        for dandiset_id, score in session.execute(
            text(
                "SELECT rowid, bm25(search_dandisets, 10.0, 4.0, 2.0) FROM search_dandisets "
                "WHERE search_dandisets MATCH :q"
            ),
            {"q": fts},
        ).all():
            ranks[int(dandiset_id)] = 1.0 - float(score)  # bm25: lower is better, negative
    for dandiset_id in _path_matches(session, found):
        ranks.setdefault(dandiset_id, 0.0)
    return ranks


def _path_matches(session: Session, found: list[str]) -> set[int]:
    """The dandisets where every word of *found* begins a word of one of their paths (a
    range of the words' B-tree index per word)."""
    result: set[int] | None = None
    for word in found:
        upper = word[:-1] + chr(ord(word[-1]) + 1)
        ids = set(
            session.scalars(
                text(
                    "SELECT DISTINCT dandiset_id FROM search_path_words "
                    "WHERE word >= :w AND word < :u"
                ),
                {"w": word, "u": upper},
            )
        )
        result = ids if result is None else result & ids
        if not result:
            return set()
    return result or set()


def ranked(ids: Iterable[int], ranks: dict[int, float]) -> list[int]:
    """*ids* by rank (highest first), then identifier."""
    return sorted(ids, key=lambda i: (-ranks.get(i, 0.0), i))
