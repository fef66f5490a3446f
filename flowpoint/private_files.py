"""Local files only their owner can read or replace (docs/architecture.md, section 10a: 0700 directories, 0600 files,
ownership checked).

flowpoint unpickles its working files and trusts its control token, so another local user who
could create, replace or read them could run code as the job's user or control the job. Every
directory flowpoint keeps such files in is checked by :func:`private_dir` before use: it must be
a directory owned by the current user that no one else can write, below directories that only
the user or root can change (a directory anyone can write is accepted only with the sticky bit,
as ``/tmp``). Files are written by :func:`write_private` with mode 0600 whatever the umask.

Directories the user chooses for durable state (checkpoint, savepoint and remote working
directories, the run directories ``--resume`` considers) and ``FLOWPOINT_HOME`` are checked the
same way by :func:`check_dir` (docs/architecture.md, section 10a), without being created or tightened; for the state
directories the setting :data:`TRUST_SHARED` (named in every refusal) turns the check off.

On systems without POSIX ownership (Windows) the checks are skipped.
"""

from __future__ import annotations

import contextlib
import os
import stat

from flowpoint.errors import InsecurePathError

POSIX = os.name == "posix"
DIR_MODE = 0o700
FILE_MODE = 0o600
#: The setting that accepts checkpoint, savepoint and remote working directories (and run
#: directories) that other users own or can write: only for users who trust every one of them.
TRUST_SHARED = "security.trust-shared-directories"


def _uid() -> int:
    return os.geteuid() if POSIX else 0


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _sentence(hint: str | None) -> str:
    return hint[:1].upper() + hint[1:] if hint else ""


def _check_ancestors(path: str, what: str, hint: str | None = None) -> None:
    """No one but the user (or root) can rename or replace ``path`` through a parent directory
    (parents that do not exist yet are skipped: what exists of the path is checked)."""
    me = _uid()
    parent = os.path.dirname(path)
    while True:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            st = None
        if st is not None and st.st_uid not in (me, 0):
            msg = (
                f"{what} {path} is below {parent}, which belongs to {_owner(st.st_uid)}: that user could replace it. "
                f"{_sentence(hint) or 'Use a directory below one you own'}"
            )
            raise InsecurePathError(msg)
        if st is not None and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            msg = (
                f"{what} {path} is below {parent}, which other users can write (mode {stat.S_IMODE(st.st_mode):04o}, "
                f"no sticky bit): they could replace it. Run `chmod go-w {parent}`, or {hint or 'use another directory'}"
            )
            raise InsecurePathError(msg)
        up = os.path.dirname(parent)
        if up == parent:
            return
        parent = up


def _check_links(path: str, what: str, hint: str | None = None) -> None:
    """A symbolic link on the way to ``path`` must belong to the user or root."""
    me = _uid()
    current = os.sep if os.path.isabs(path) else ""
    for part in [p for p in path.split(os.sep) if p]:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (me, 0):
            msg = (
                f"{what} {path} goes through the symbolic link {current} of {_owner(st.st_uid)}: refused. "
                f"{_sentence(hint) or 'Use a path without it'}"
            )
            raise InsecurePathError(msg)


def check_private_dir(path: str, what: str = "directory", hint: str | None = None) -> None:
    """Refuse an existing ``path`` that another user owns or can write (see the module doc);
    ``hint``: what to do instead (default: choose another state.working.dir)."""
    if not POSIX:
        return
    hint = hint or "choose another directory (state.working.dir)"
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        msg = f"{what} {path} is not a directory"
        raise InsecurePathError(msg)
    if st.st_uid != _uid():
        msg = (
            f"{what} {path} belongs to {_owner(st.st_uid)}, not to you ({_owner(_uid())}): flowpoint would read files another "
            f"user can replace. Remove it, or {hint}"
        )
        raise InsecurePathError(msg)
    if st.st_mode & 0o022:
        msg = (
            f"{what} {path} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o}): flowpoint would read files "
            f"they can replace. Run `chmod 700 {path}`, or {hint}"
        )
        raise InsecurePathError(msg)


def check_closed_dir(path: str, what: str, hint: str | None = None) -> None:
    """Refuse an existing directory ``path`` that other users can enter, list or read (any group
    or other permission bit): it holds what only its owner may read (the control token, logs
    with the dashboard's address, records of failed jobs). flowpoint creates such directories
    with mode 0700; one it finds wider was made by someone else, and is not tightened behind the
    user's back: the message says how (``chmod 700``)."""
    if not POSIX:
        return
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        msg = (
            f"{what} {path} is open to other users (mode {mode:04o}): it holds files only you may read (the control "
            f"token, job logs). Run `chmod 700 {path}`{', or ' + hint if hint else ''}"
        )
        raise InsecurePathError(msg)


def check_dir(
    path: str, what: str, hint: str, create: bool = False, mode: int = DIR_MODE, closed: bool = False, exact: bool = True,
) -> str:
    """``path`` (absolute, links resolved) if no other user owns it or can write it, nor replace
    it through a symbolic link or a parent directory; refused with :class:`InsecurePathError`
    naming it and saying ``hint`` otherwise. A missing ``path`` is created (mode ``mode``, its
    missing parents too; ``exact=False``: less the umask's bits) when ``create``, else what
    exists of it is checked. Nothing is tightened.
    ``closed``: an existing ``path`` must also be closed to other users (:func:`check_closed_dir`)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not POSIX:
        return path
    _check_links(path, what, hint)
    real = os.path.realpath(path)
    try:
        _check_ancestors(real, what, hint)  # before anything is created in them
        if create:
            makedirs(real, mode, exact)
            _check_ancestors(real, what, hint)  # and as they are now
        if os.path.lexists(real):
            check_private_dir(real, what, hint)
            if closed:
                check_closed_dir(real, what, hint)
    except InsecurePathError:
        raise
    except OSError as e:
        msg = f"cannot use {what} {path}: {e.strerror or e}. Choose a local directory you can write, or {hint}"
        raise InsecurePathError(msg) from e
    return real


def private_dir(path: str, what: str = "directory", tighten: bool = True) -> str:
    """``path`` (absolute, symbolic links resolved) as a directory only the user can use: created
    with mode 0700 if missing (missing parents too), else checked (owner, not writable by
    others); ``tighten``: an existing directory readable by others becomes 0700 too. Raises
    :class:`InsecurePathError` naming the directory, or it with the OSError that stopped it."""
    path = os.path.abspath(os.path.expanduser(path))
    if not POSIX:
        os.makedirs(path, exist_ok=True)
        return path
    _check_links(path, what)
    real = os.path.realpath(path)
    try:
        makedirs(real)  # missing parents too are 0700, whatever the umask (~/.cache included)
        _check_ancestors(real, what)
        check_private_dir(real, what)
        if tighten and stat.S_IMODE(os.stat(real).st_mode) != DIR_MODE:
            os.chmod(real, DIR_MODE)
    except InsecurePathError:
        raise
    except OSError as e:
        msg = f"cannot use {what} {path}: {e.strerror or e}. Choose a local directory you can write (state.working.dir)"
        raise InsecurePathError(msg) from e
    return real


def makedirs(path: str, mode: int = DIR_MODE, exact: bool = True) -> None:
    """``os.makedirs`` whose new directories have mode ``mode`` (0700) whatever the umask
    (existing ones are left as they are); ``exact=False``: ``mode`` less the umask's bits."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        up = os.path.dirname(p)
        if up == p:
            break
        p = up
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, mode)
            if POSIX and exact:
                os.chmod(d, mode)


#: Output directories flowpoint creates (sinks): readable by the output's readers, writable only
#: by the job's user. A umask only narrows this (077 keeps them private).
OUTPUT_DIR_MODE = 0o755


def check_output_tree(base: str, what: str, what_below: str, hint: str) -> str:
    """A sink's output directory ``base`` (created if missing) and every directory below it, as
    the job starts: the job user's and writable by no one else, below directories no one else
    can replace; else :class:`InsecurePathError` naming the directory (``what`` for ``base``,
    ``what_below`` for the others) and saying ``hint``."""
    base = check_dir(base, what, hint, create=True, mode=OUTPUT_DIR_MODE, exact=False)
    for root, dirs, _files in os.walk(base):
        for name in sorted(dirs):
            check_private_dir(os.path.join(root, name), what_below, hint)
    return base


def output_subdir(base: str, directory: str, what: str, what_below: str, hint: str, checked: set[str]) -> str:
    """``directory`` below a sink's checked output directory ``base``, created if missing (mode
    0755 less the umask) and, the first time for ``checked``, refused with InsecurePathError if
    it or a directory between it and ``base`` belongs to another user or others can write it:
    a task writes its data files there."""
    base = os.path.normpath(base)
    directory = os.path.normpath(directory)
    if directory in checked:
        return directory
    makedirs(directory, OUTPUT_DIR_MODE, exact=False)
    d = directory
    while True:
        check_private_dir(d, what if d == base else what_below, hint)
        if d == base or len(d) <= len(base):
            break
        d = os.path.dirname(d)
    checked.add(directory)
    return directory


def write_private(path: str, data: bytes, atomic: bool = True) -> None:
    """Write ``data`` to ``path`` with mode 0600 (whatever the umask), through ``<path>.tmp`` and a
    rename when ``atomic``; missing parent directories are created with mode 0700."""
    makedirs(os.path.dirname(path))
    target = path + ".tmp" if atomic else path
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(target, flags, FILE_MODE)
    try:
        try:
            if POSIX:
                os.fchmod(fd, FILE_MODE)  # an existing file keeps its mode on open: set it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except BaseException:
        if atomic:  # a partial temporary file (a full disk) would only take more space
            with contextlib.suppress(OSError):
                os.remove(target)
        raise
    if atomic:
        os.replace(target, path)

