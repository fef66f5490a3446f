"""Browser sessions of the dashboard, as Jupyter has them.

A browser proves once that its user holds the installation's control token: the URL a job or
``flowpoint ui`` prints carries it (``http://127.0.0.1:8081/?token=...``). The server answers
that request by setting a session cookie and redirecting to the same URL without the token, so
the token leaves the address bar and the browser history. Later requests carry the cookie.

- The cookie's value is a random session id of this server process, not the token: a cookie
  that leaks opens this server while it runs, never the installation's other endpoints.
- ``HttpOnly`` (the page's scripts cannot read it) and ``SameSite=Strict`` (a request another
  site makes, a link followed from it included, does not carry it).
- Browsers send a cookie to every port of a host, so its name carries the server's port:
  servers on other ports of 127.0.0.1 neither read nor overwrite one another's sessions.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections import OrderedDict
from http.cookies import CookieError, SimpleCookie

COOKIE_PREFIX = "flowpoint-session-"
MAX_SESSIONS = 64  # the oldest session is dropped beyond this many


class Sessions:
    def __init__(self, port: int) -> None:
        self.cookie_name = f"{COOKIE_PREFIX}{port}"
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def create(self) -> str:
        """A new session; returns the ``Set-Cookie`` header value that starts it."""
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._ids[session] = None
            while len(self._ids) > MAX_SESSIONS:
                self._ids.popitem(last=False)
        return f"{self.cookie_name}={session}; HttpOnly; SameSite=Strict; Path=/"

    def valid(self, cookie_header: str | None) -> bool:
        """Whether a ``Cookie`` header carries a session of this server."""
        if not cookie_header:
            return False
        try:
            cookies = SimpleCookie(cookie_header)
        except CookieError:
            return False
        morsel = cookies.get(self.cookie_name)
        if morsel is None or not morsel.value:
            return False
        value = morsel.value.encode("utf-8", "replace")
        with self._lock:
            known = list(self._ids)
        found = False
        for session in known:  # compared in constant time, each one
            found |= hmac.compare_digest(value, session.encode("ascii"))
        return found
