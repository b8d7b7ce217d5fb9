"""DANDI's page-number pagination: ``{count, next, previous, results}``, ``next`` and
``previous`` full URLs (the request's own URL with ``page`` replaced), ``?page=``
(from 1) and ``?page_size=`` (at most :data:`MAX_PAGE_SIZE`)."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from fastapi import Query, Request
from pydantic import BaseModel, Field

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: The largest page number: offsets stay within a 64-bit integer (the databases' limit).
MAX_PAGE = 10**9


class Page(BaseModel, Generic[T]):
    """One page of a list, as DANDI's ``DandiPagination`` answers it."""

    count: int = Field(description="How many items all pages hold")
    next: str | None = Field(description="The URL of the next page; null on the last")
    previous: str | None = Field(description="The URL of the previous page; null on the first")
    results: list[T]


PageNumber = Annotated[int, Query(ge=1, le=MAX_PAGE, description="The page, from 1")]
PageSize = Annotated[
    int, Query(ge=1, le=MAX_PAGE_SIZE, description=f"Items per page (at most {MAX_PAGE_SIZE})")
]


def page_url(request: Request, page: int) -> str:
    """The request's full URL with ``page`` set to *page* (other parameters kept);
    DANDI leaves ``page`` out for the first page."""
    url = request.url.remove_query_params("page")
    if page > 1:
        url = url.include_query_params(page=page)
    return str(url)


def make_page(
    request: Request, results: list[T], *, count: int, page: int, page_size: int
) -> Page[T]:
    """The page *page* of *count* items whose *results* the caller fetched
    (``offset = (page - 1) * page_size``)."""
    has_next = page * page_size < count
    return Page[T](
        count=count,
        next=page_url(request, page + 1) if has_next else None,
        previous=page_url(request, page - 1) if page > 1 else None,
        results=results,
    )
