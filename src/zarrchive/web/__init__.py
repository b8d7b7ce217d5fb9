"""Server-rendered pages to browse the archive (Jinja2 templates, a little plain JS).

The pages read through the same services, with the same visibility rules, as the API.  A
signed-in browser holds the id of a server-side session in a cookie that only this package
reads (never the API); every form carries a token against cross-site posts
(:mod:`zarrchive.web.forms`), and every answer the security headers
(:mod:`zarrchive.web.security_headers`, installed by the app factory).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from zarrchive.web import account_pages, dandiset_pages, oidc, signin, zarr_pages
from zarrchive.web.docs import install_docs
from zarrchive.web.render import HERE

#: The pages' icon.
FAVICON = "/static/web/favicon.svg"


def install_web(app: FastAPI) -> None:
    """Add the pages, their static files and offline ``/docs`` to *app* (created with
    ``docs_url=None``)."""
    install_docs(app)
    app.mount("/static/web", StaticFiles(directory=HERE / "static"), name="web-static")
    app.add_api_route("/favicon.ico", _favicon, include_in_schema=False)
    app.include_router(signin.router)
    app.include_router(oidc.router)
    app.include_router(zarr_pages.router)
    app.include_router(dandiset_pages.router)
    app.include_router(account_pages.router)


def _favicon() -> RedirectResponse:
    """Browsers ask for ``/favicon.ico`` whatever the page says: the same icon."""
    return RedirectResponse(FAVICON, status_code=301)
