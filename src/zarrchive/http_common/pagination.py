"""DANDI's page-number pagination: ``{count, next, previous, results}`` with ``next`` and
``previous`` full URLs (the request's own on the archive's external address, with ``page``
changed), ``?page=`` from 1 and
``?page_size=``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Generic, TypeVar

from fastapi import Query, Request
from pydantic import BaseModel, Field

from zarrchive.http_common.public_url import public_request_url

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: The largest page number: offsets stay within a 64-bit integer (the databases' limit).
MAX_PAGE = 10**9


class Page(BaseModel, Generic[T]):
    count: int = Field(description="Items over every page")
    next: str | None = Field(description="URL of the next page")
    previous: str | None = Field(description="URL of the previous page")
    results: list[T]


@dataclass(frozen=True)
class PageRequest:
    """Which page a request asks for."""

    page: int
    page_size: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.page_size


def page_request(
    page: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page number, from 1")] = 1,
    page_size: Annotated[
        int, Query(ge=1, le=MAX_PAGE_SIZE, description="Items per page")
    ] = DEFAULT_PAGE_SIZE,
) -> PageRequest:
    """The FastAPI dependency of ``?page=&page_size=``."""
    return PageRequest(page, page_size)


def page_url(request: Request, page: int) -> str:
    """The request's full URL with ``page`` set to *page* (other parameters kept); DANDI
    leaves ``page`` out for the first page."""
    url = public_request_url(request).remove_query_params("page")
    if page > 1:
        url = url.include_query_params(page=page)
    return str(url)


def make_page(request: Request, asked: PageRequest, count: int, results: list[T]) -> Page[T]:
    """The page *asked* of *count* items, holding *results*, with its neighbours' URLs."""
    more = asked.offset + len(results) < count
    return Page[T](
        count=count,
        next=page_url(request, asked.page + 1) if more else None,
        previous=page_url(request, asked.page - 1) if asked.page > 1 else None,
        results=results,
    )


def after_url(request: Request, key: str) -> str:
    """This request's public URL with ``after`` set to *key*: the next page of a listing in
    key order (DANDI's flat ``files/``)."""
    return str(public_request_url(request).include_query_params(after=key))
