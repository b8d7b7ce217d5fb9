"""The signed-in user's account page (``/account``: its status and API keys) and the
administrators' accounts page (``/admin/users``: approve and reject).

Every form is protected against cross-site posts (:mod:`zarrchive.web.forms`); the rules
are the services' (:mod:`zarrchive.services.identity.api_keys`, :mod:`zarrchive.services.identity.accounts`).
A new key is shown once, in the answer to the form that made it (never in a URL, never
stored: the answer says ``Cache-Control: no-store``).
"""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from zarrchive.errors import InvalidInput
from zarrchive.http_common.params import KeyId
from zarrchive.services.identity import accounts, api_keys
from zarrchive.services.identity.accounts import AccountStatus
from zarrchive.services.identity.auth import Caller, require_user
from zarrchive.web.forms import TOKEN_FIELD, parse_form, require_form_from_here
from zarrchive.web.render import ArchiveOf, HtmlRoute, WebUser, page

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)


def _account_page(
    request: Request,
    archive: ArchiveOf,
    user: Caller,
    *,
    new_key: str | None = None,
    new_key_name: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    with archive.db.session() as session:
        account = accounts.me(session, user)
        keys = api_keys.list_keys(session, user)
    response = page(
        request,
        "account.html",
        status_code=status_code,
        account=account,
        keys=keys,
        new_key=new_key,
        new_key_name=new_key_name,
        api_url=str(request.base_url).rstrip("/") + "/api",
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/account", response_class=HTMLResponse)
def account(request: Request, archive: ArchiveOf, user: WebUser) -> HTMLResponse:
    return _account_page(request, archive, require_user(user))


def _expiry(raw: str) -> dt.datetime | None:
    """The form's expiry date (``YYYY-MM-DD``: the key works until that day's end, UTC)."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        day = dt.date.fromisoformat(raw[:10])
    except ValueError:
        raise InvalidInput(f"an expiry is a date, YYYY-MM-DD, not {raw[:20]!r}") from None
    return dt.datetime.combine(day, dt.time.max, tzinfo=dt.UTC).replace(microsecond=0)


@router.post("/account/keys", response_model=None)
async def create_key(request: Request, archive: ArchiveOf, user: WebUser) -> Response:
    """Make a key and show it once (with the line that gives it to ``dandi``)."""
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.state.form_token)
    caller = require_user(user)

    def make() -> tuple[api_keys.KeyInfo, str]:
        with archive.db.write_session() as session:
            return api_keys.create_key(
                session,
                caller,
                fields.get("name", ""),
                fields.get("scope", ""),
                _expiry(fields.get("expires", "")),
            )

    info, secret = await run_in_threadpool(make)
    return await run_in_threadpool(
        lambda: _account_page(request, archive, caller, new_key=secret, new_key_name=info.name)
    )


@router.post("/account/keys/{key_id}/revoke", response_model=None)
async def revoke_key(
    request: Request, archive: ArchiveOf, user: WebUser, key_id: KeyId
) -> RedirectResponse:
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.state.form_token)
    caller = require_user(user)

    def revoke() -> None:
        with archive.db.write_session() as session:
            api_keys.revoke_key(session, caller, key_id)

    await run_in_threadpool(revoke)
    return RedirectResponse("/account", status_code=303)


@router.get("/admin/users", response_class=HTMLResponse)
def admin_users(request: Request, archive: ArchiveOf, user: WebUser) -> HTMLResponse:
    """Every account, the pending ones first, with approve and reject buttons (admins)."""
    with archive.db.session() as session:
        found = accounts.list_accounts(session, require_user(user))
    return page(request, "admin_users.html", accounts=found)


@router.post("/admin/users/approve", response_model=None)
async def approve(request: Request, archive: ArchiveOf, user: WebUser) -> RedirectResponse:
    """Approve the account named by the form's ``username``."""
    return await _decide(request, archive, user, AccountStatus.APPROVED)


@router.post("/admin/users/reject", response_model=None)
async def reject(request: Request, archive: ArchiveOf, user: WebUser) -> RedirectResponse:
    """Reject the account named by the form's ``username``."""
    return await _decide(request, archive, user, AccountStatus.REJECTED)


async def _decide(
    request: Request, archive: ArchiveOf, user: WebUser, status: AccountStatus
) -> RedirectResponse:
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.state.form_token)
    username = fields.get("username", "")
    caller = require_user(user)

    def apply() -> None:
        with archive.db.write_session() as session:
            accounts.set_status(session, caller, username, status)

    await run_in_threadpool(apply)
    return RedirectResponse("/admin/users", status_code=303)
