"""Sign-in and sign-out of the web view: the only forms, the only POSTs (see
control/http/web/signin.py for the session, the cookie and the CSRF rules).

* ``GET /ui/login``: the form, with a fresh double-submit value (also set as the
  short-lived cookie ``memfs_ui_login``, path ``/ui/login``).
* ``POST /ui/login`` (``token``, ``nonce``, ``next``): refused (403) unless posted
  from this listener's own pages with the matching double-submit value; a bad,
  revoked or expired token gets the form again (401) and signs nobody in; a good one
  opens a web session, sets its cookie and goes to ``next`` (a ``/ui/`` path); when
  every place for a session is taken by other agents' live sessions, the form comes
  back with 503, ``Retry-After`` and the reason, and nobody is signed out.
* ``POST /ui/logout`` (``csrf``): ends the session (same origin and the session's
  CSRF value required).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from memfs.control.http.problems import Problem, read_body
from memfs.control.http.web.signin import (
    COOKIE,
    LOGIN_COOKIE,
    LOGIN_FORM_SECONDS,
    TooManySessions,
    safe_next,
    same_origin,
    same_value,
    secure,
)

if TYPE_CHECKING:
    from memfs.control.http.web.pages import Web

FORM_LIMIT = 16 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"
CROSS_SITE = ("this form was not sent from this memfs's own sign-in page (cross-site "
              "requests are refused): open /ui/login and sign in there")


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded body's fields (the first value of each). Raises Problem."""
    body = await read_body(request, FORM_LIMIT)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != FORM_TYPE:
        raise Problem("invalid", f"a form is sent as {FORM_TYPE}", status=415)
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        raise Problem("invalid", "the form is not valid UTF-8 form data") from None
    return {name: values[0] for name, values in fields.items() if values}


def _login_page(web: Web, request: Request, next_url: str, *, error: str | None = None,
                status: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(24)
    session = web.session(request)
    response = web.html("login.html", {"next": next_url, "nonce": nonce, "error": error,
                                       "signed_in_as": session.agent if session else None},
                        status)
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_FORM_SECONDS, path="/ui/login",
                        httponly=True, samesite="strict", secure=secure(request))
    return response


async def login_form(web: Web, request: Request) -> Response:
    """The sign-in form."""
    try:
        next_url = safe_next(request.query_params.get("next"))
        return _login_page(web, request, next_url)
    except Exception as error:
        return web.error(error, None)


async def login(web: Web, request: Request) -> Response:
    """Sign in with a token (see the module doc)."""
    try:
        form = await _form(request)  # read first: an unread body would end the connection
        if not same_origin(request):
            raise Problem("permission_denied", CROSS_SITE)
        if not same_value(form.get("nonce"), request.cookies.get(LOGIN_COOKIE)):
            raise Problem("permission_denied", "the sign-in form expired or was not sent "
                          "from this memfs's sign-in page: reload /ui/login and try again")
        next_url = safe_next(form.get("next"))
        token = form.get("token", "").strip()
        record = web.dispatcher.tokens.verify(token) if token else None
        if record is None or record.agent not in web.dispatcher.engine.agents:
            return _login_page(web, request, next_url, status=401,
                               error="That token is unknown, revoked or expired.")
        web.signins.close(request.cookies.get(COOKIE))
        try:
            cookie, session = web.signins.open(record)
        except TooManySessions as full:
            page = _login_page(web, request, next_url, status=503, error=f"{full}.")
            page.headers["Retry-After"] = str(full.retry_after)
            return page
        response = RedirectResponse(next_url, 303)
        lifetime = max(1, int(session.expires - web.signins.clock()))
        response.set_cookie(COOKIE, cookie, max_age=lifetime, path="/ui", httponly=True,
                            samesite="strict", secure=secure(request))
        response.delete_cookie(LOGIN_COOKIE, path="/ui/login", httponly=True,
                               samesite="strict", secure=secure(request))
        return response
    except Exception as error:
        return web.error(error, None)


async def logout(web: Web, request: Request) -> Response:
    """Sign out (see the module doc)."""
    try:
        form = await _form(request)
        if not same_origin(request):
            raise Problem("permission_denied", CROSS_SITE)
        cookie = request.cookies.get(COOKIE)
        session = web.session(request)
        if session is not None and not same_value(form.get("csrf"), session.csrf):
            raise Problem("permission_denied", "sign out from a page of this memfs")
        web.signins.close(cookie)
        response = RedirectResponse("/ui/login", 303)
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict",
                               secure=secure(request))
        return response
    except Exception as error:
        return web.error(error, web.session(request))
