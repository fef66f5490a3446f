"""The dashboard's files (``flowpoint/control/web/``), as the control endpoint and
``flowpoint ui`` serve them: ``/`` is ``index.html``, ``/web/<name>`` a file of that directory.

Only a regular file directly in the directory is served, named by letters, digits, ``.``, ``_``
and ``-`` (no separators, no percent-encoding, no leading dot): anything else, ``..`` and
encoded slashes included, is not found. A symbolic link is not followed.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

WEB_DIR = Path(__file__).with_name("web")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
    "": "text/plain; charset=utf-8",  # NOTICE, LICENSE
    ".license": "text/plain; charset=utf-8",
}


def web_path(path: str) -> str | None:
    """The file name a request path names (``/`` -> ``index.html``), None when the path is not
    one of the dashboard's."""
    if path in ("/", "/index.html"):
        return "index.html"
    if path.startswith("/web/"):
        return path[len("/web/"):]
    return None


def content_type(name: str) -> str:
    return CONTENT_TYPES.get(os.path.splitext(name)[1].lower(), "application/octet-stream")


def read(directory: str | os.PathLike, name: str) -> bytes | None:
    """The bytes of ``name`` in ``directory``, or None when it is not a file served there."""
    if not _NAME.match(name):
        return None
    try:
        if name not in os.listdir(directory):
            return None
        path = os.path.join(directory, name)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()
