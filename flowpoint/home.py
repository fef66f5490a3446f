"""The installation's directory, ``$FLOWPOINT_HOME`` (default ``~/.flowpoint``): the control
token, the signing key, the job registry and the logs live there, private to its owner."""

from __future__ import annotations

import os
from pathlib import Path

from flowpoint import private_files

HOME_VARIABLE = "FLOWPOINT_HOME"


def flowpoint_home() -> Path:
    """``$FLOWPOINT_HOME``, else ``~/.flowpoint``."""
    home = os.environ.get(HOME_VARIABLE)
    return (Path(os.path.expanduser(home)) if home else Path.home() / ".flowpoint").absolute()


HOME_HINT = f"set {HOME_VARIABLE} to a directory of your own (default ~/.flowpoint)"


def check_home(create: bool = False) -> None:
    """Refuse (InsecurePathError naming it) a ``FLOWPOINT_HOME`` that another user owns, can
    write or replace, or can enter or read (it holds the control token and the job logs);
    ``create``: a missing one is created with mode 0700 (whatever the umask) first."""
    private_files.check_dir(str(flowpoint_home()), f"the {HOME_VARIABLE} directory", HOME_HINT, create, closed=True)


def home_dir(name: str, what: str) -> Path:
    """``$FLOWPOINT_HOME/<name>`` (``logs``, ...), created with mode 0700 whatever the umask, its
    home too; an existing one another user owns, or that is open to others, is refused
    (InsecurePathError naming it and saying ``chmod 700``), never tightened silently."""
    check_home(create=True)
    return Path(private_files.check_dir(str(flowpoint_home() / name), what, HOME_HINT, create=True, closed=True))
