"""Who may use a job's control endpoint, and where its savepoints may go.

- **The token.** One secret per installation, in ``$FLOWPOINT_HOME/control-token`` (else
  ``~/.flowpoint/control-token``), mode 0600, created by the first job that serves an endpoint.
  Every request must carry it (``Authorization: Bearer <token>``); the CLI reads it from the
  file, so only users who can read that file (its owner) control the jobs. A token file that
  another user owns or can read is refused (:class:`~flowpoint.errors.InsecurePathError`), and
  so is a ``FLOWPOINT_HOME`` another user owns, can write, or can replace through a parent
  directory (``private_files.check_dir``), before the token is written or read.
- **The request.** Its ``Host`` header must name the endpoint's own address
  (``127.0.0.1:<port>`` or ``localhost:<port>``: a web page that rebinds a DNS name to
  127.0.0.1 sends its own name), it may carry no ``Origin`` but the endpoint's own (browsers
  send one on cross-site requests), and a body must be ``Content-Type: application/json``
  (what a web page sends without a CORS preflight is ``text/plain`` or a form).
- **The savepoint target.** A target directory sent without ``"explicit": true`` must lie
  within the job's ``state.savepoints.dir``. The CLI marks the directory its user typed
  (``flowpoint savepoint <job> <dir>``) as explicit: it is the owner's choice. Either way the
  target must be an absolute local path or a URI (``scheme://...``), without ``..`` segments.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from flowpoint.errors import ConfigurationError, InsecurePathError
from flowpoint.home import HOME_VARIABLE, check_home, flowpoint_home

TOKEN_FILE = "control-token"


class TokenMissingError(ConfigurationError):
    """No control token file yet: no job has served an endpoint with this FLOWPOINT_HOME."""


def token_path() -> Path:
    return flowpoint_home() / TOKEN_FILE


def _check_token_file(fd: int, path: Path) -> None:
    if os.name != "posix":
        return
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        msg = f"the control token {path} is not a regular file: remove it (the next job creates a new one)"
        raise InsecurePathError(msg)
    if st.st_uid != os.geteuid():
        msg = (
            f"the control token {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): another user chose it "
            f"and could control your jobs. Remove it (the next job creates a new one), or set {HOME_VARIABLE}"
        )
        raise InsecurePathError(msg)
    if st.st_mode & 0o077:
        msg = (
            f"the control token {path} can be read or written by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"anyone who reads it can cancel your jobs and take savepoints. Run `chmod 600 {path}`, or remove it "
            "(the next job creates a new one; restart running jobs)"
        )
        raise InsecurePathError(msg)


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        msg = f"the control token {path} is a symbolic link: refused. Remove it (the next job creates a new one)"
        raise InsecurePathError(msg) from None
    try:
        _check_token_file(fd, path)
        token = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if len(token) < 32:
        msg = f"the control token {path} is empty or too short: remove it (the next job creates a new one)"
        raise InsecurePathError(msg)
    return token


def read_token() -> str:
    """The installation's token, for the CLI (never creates one)."""
    path = token_path()
    check_home()
    try:
        return _read(path)
    except FileNotFoundError:
        msg = (
            f"no control token {path}: a job creates it when it starts. Is the job running as another user, "
            f"or with another {HOME_VARIABLE}?"
        )
        raise TokenMissingError(msg) from None
    except OSError as e:
        msg = f"cannot read the control token {path}: {e.strerror or e}"
        raise InsecurePathError(msg) from e


def load_or_create_token() -> str:
    """The installation's token, created (0600, atomically: concurrent first jobs agree) if
    there is none. Raises InsecurePathError for a token file others own or can read, and
    OSError when the file cannot be created."""
    path = token_path()
    check_home(create=True)
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    fd, tmp = tempfile.mkstemp(prefix=".control-token.", dir=path.parent)  # mode 0600
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode("ascii"))
        os.close(fd)
        fd = -1
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # never replaces a token another job already serves with
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(tmp)
    return _read(path)


def token_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (compared in constant time)."""
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8", "replace"), token.encode("utf-8"))


def own_hosts(port: int) -> set[str]:
    """The Host header values that name the endpoint itself."""
    return {f"127.0.0.1:{port}", f"localhost:{port}"}


def host_allowed(host: str | None, port: int) -> bool:
    return host is not None and host.strip().lower() in own_hosts(port)


def origin_allowed(origin: str | None, port: int) -> bool:
    """No Origin (the CLI, curl), or the endpoint's own origin; any other page is foreign."""
    if origin is None:
        return True
    return origin.strip().lower() in {f"http://{h}" for h in own_hosts(port)}


def is_json(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


# -- savepoint targets -----------------------------------------------------------------------------

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class TargetRefused(ValueError):
    """A savepoint target the endpoint refuses; ``forbidden``: well-formed but not allowed."""

    def __init__(self, message: str, forbidden: bool = False):
        super().__init__(message)
        self.forbidden = forbidden


def _segments(path: str) -> list[str]:
    return [unquote(p) for p in re.split(r"[/\\]", path)]


def canonical_target(target: str) -> str:
    """``target`` as an absolute local path (normalized) or a URI, or TargetRefused: a relative
    path, ``..`` segments (also percent-encoded), control characters."""
    if any(ord(c) < 32 or ord(c) == 127 for c in target):
        msg = "the savepoint target contains control characters"
        raise TargetRefused(msg)
    m = _SCHEME.match(target)
    if m:
        parts = urlsplit(target)
        if ".." in _segments(parts.path) or ".." in _segments(parts.netloc):
            msg = f"the savepoint target {target!r} has '..' segments: give the directory itself"
            raise TargetRefused(msg)
        if m.group(1).lower() == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                msg = f"the savepoint target {target!r} is not a local file:///absolute/path URI"
                raise TargetRefused(msg)
            return "file://" + os.path.normpath(unquote(parts.path))
        return target
    if ".." in _segments(target):
        msg = f"the savepoint target {target!r} has '..' segments: give the directory itself"
        raise TargetRefused(msg)
    if not os.path.isabs(target):
        msg = f"the savepoint target {target!r} is not an absolute path or a URI (file://, s3://, hdfs://, ...)"
        raise TargetRefused(msg)
    return os.path.normpath(target)


def _local(uri: str) -> str | None:
    if uri.startswith("file://"):
        return unquote(urlsplit(uri).path)
    return None if _SCHEME.match(uri) else uri


def _within(target: str, root: str) -> bool:
    t_local, r_local = _local(target), _local(root)
    if (t_local is None) != (r_local is None):
        return False
    if t_local is not None and r_local is not None:
        t, r = os.path.realpath(t_local), os.path.realpath(r_local)
        return t == r or t.startswith(r.rstrip(os.sep) + os.sep)
    t_parts, r_parts = urlsplit(target), urlsplit(root)
    if (t_parts.scheme.lower(), t_parts.netloc) != (r_parts.scheme.lower(), r_parts.netloc):
        return False
    t_path, r_path = t_parts.path.rstrip("/"), r_parts.path.rstrip("/")
    return t_path == r_path or t_path.startswith(r_path + "/")


def savepoint_roots(config: Any) -> list[str]:
    """The configured directories a target may lie within without being explicit."""
    root = config.get("state.savepoints.dir") if config is not None else None
    return [str(root)] if root else []


def check_target(target: str | None, explicit: bool, config: Any) -> str | None:
    """The savepoint target to use (None: the job's ``state.savepoints.dir``), or TargetRefused."""
    if target is None:
        return None
    canonical = canonical_target(target)
    if explicit:
        return canonical
    roots = savepoint_roots(config)
    if not any(_within(canonical, canonical_target(r)) for r in roots):
        where = f"the job's state.savepoints.dir ({roots[0]})" if roots else "a savepoint directory (the job sets no state.savepoints.dir)"
        msg = (
            f"the savepoint target {target!r} is not within {where}; the job's owner can choose any directory with "
            "`flowpoint savepoint <job-id> <dir>`"
        )
        raise TargetRefused(msg, forbidden=True)
    return canonical
