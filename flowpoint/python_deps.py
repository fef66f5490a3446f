"""Python dependencies of a job, as Flink's ``-pyfs``/``-pyreq``/``-pyarch`` (``python.files``,
``python.requirements``, ``python.archives``): what the driver prepares; the Spark layer
(flowpoint/spark/session.py ``ship_python_dependencies``) ships them to the executors.

- ``python.files``: Python files, zips and directories (packages or folders of modules). A
  directory is zipped (executors put zips on their path); on the driver it goes on ``sys.path``.
- ``python.requirements``: a requirements file, installed with ``pip install --target`` into a
  directory under ``$FLOWPOINT_HOME/python-requirements/<hash of the file>`` (reused while the file
  is unchanged; pip's own configuration decides the index: ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``,
  a local wheelhouse...), then shipped as a zip and put on the driver's path.
- ``python.archives``: ``archive.zip#alias``: Spark's ``addArchive`` unpacks the archive on every
  executor into the folder ``alias`` (the archive's file name without ``#alias``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from flowpoint import private_files
from flowpoint.errors import ConfigurationError
from flowpoint.home import home_dir


class PythonDependencyError(ConfigurationError):
    """A -pyfs/-pyreq/-pyarch entry that is missing or cannot be installed (refused before Spark
    starts)."""


# paths put on the driver's sys.path for python.files/python.requirements: not handed on to the
# executors' PYTHONPATH (flowpoint/spark/session.py), which must import Spark's shipped copies
DRIVER_ONLY_PATHS: set[str] = set()


def split(value: object) -> list[str]:
    return [v.strip() for v in str(value or "").split(",") if v.strip()]


def zip_directory(directory: str) -> str:
    """A zip of ``directory`` whose entries are relative to it (so a folder of modules, or a
    folder holding packages, is importable from the zip as from the folder). Written into a
    folder of the temporary directory named after the directory's path (one zip per directory: Spark
    refuses a second file of the same name from another path). The folder is the user's own
    (0700, owner checked): another local user who created it first could swap the zip, whose code
    the executors run, so such a folder is refused by name."""
    src = Path(directory).resolve()
    tag = hashlib.sha256(str(src).encode()).hexdigest()[:16]
    out_dir = Path(private_files.private_dir(
        os.path.join(tempfile.gettempdir(), f"flowpoint-pyfs-{os.getuid()}-{tag}"), "the folder of -pyfs's zip"))
    target = out_dir / f"{src.name or 'files'}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for root, dirs, files in os.walk(src):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                full = Path(root) / f
                z.write(full, full.relative_to(src).as_posix())
    return str(target)


def install_requirements(requirements: str) -> str:
    """``pip install --target`` the requirements file into a directory reused while the file is
    unchanged; its path. Relative paths in the file are read from the file's folder."""
    path = Path(requirements).expanduser().resolve()
    if not path.exists():
        msg = f"python.requirements (-pyreq): requirements file {requirements!r} not found"
        raise PythonDependencyError(msg)
    try:
        content = path.read_bytes()
    except OSError as e:
        msg = f"python.requirements (-pyreq): requirements file {requirements!r} cannot be read: {e.strerror or e}"
        raise PythonDependencyError(msg) from None
    digest = hashlib.sha256(content + str(path).encode()).hexdigest()[:16]

    # 0700 whatever the umask: the job imports this code (an open home is refused, naming it)
    target = home_dir("python-requirements", "the python.requirements directory") / digest
    done = target / ".flowpoint-installed"
    if done.is_file():
        return str(target)
    private_files.makedirs(str(target))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "--target", str(target), "-r", str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=str(path.parent), check=False)  # noqa: S603
    if result.returncode != 0:
        msg = f"python.requirements (-pyreq): `pip install -r {path}` failed ({result.returncode}):\n{(result.stderr or result.stdout)[-3000:]}"
        raise PythonDependencyError(msg)
    done.write_text(str(path))
    return str(target)


def driver_paths(files: object, requirements: object) -> list[str]:
    """What goes on the driver's ``sys.path`` for ``python.files`` and ``python.requirements``."""
    out = []
    for f in split(files):
        p = os.path.abspath(os.path.expanduser(f))
        if not os.path.exists(p):
            msg = f"python.files (-pyfs): {f!r} not found"
            raise PythonDependencyError(msg)
        out.append(p if os.path.isdir(p) or p.endswith((".zip", ".egg")) else os.path.dirname(p))
    if requirements:
        out.append(install_requirements(str(requirements)))
    return out


def executor_py_files(files: object, requirements: object) -> list[str]:
    """What ``addPyFile`` ships: files and zips as they are, directories and the installed
    requirements zipped."""
    out = []
    for f in split(files):
        p = os.path.abspath(os.path.expanduser(f))
        out.append(zip_directory(p) if os.path.isdir(p) else p)
    if requirements:
        out.append(zip_directory(install_requirements(str(requirements))))
    return out


def check_archives(archives: object) -> list[str]:
    """``python.archives`` entries (``path[#alias]``) with absolute paths; missing ones refused."""
    out = []
    for a in split(archives):
        path, sep, alias = a.partition("#")
        p = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(p):
            msg = f"python.archives (-pyarch): archive {path!r} not found"
            raise PythonDependencyError(msg)
        out.append(p + (sep + alias if alias else ""))
    return out


def prepare_python_dependencies(settings: dict) -> dict:
    """The CLI's settings with ``python.files``/``python.archives`` paths made absolute and
    checked, and the driver's ``sys.path`` extended (files, directories, installed requirements)."""
    out = dict(settings)
    files, requirements = settings.get("python.files"), settings.get("python.requirements")
    for p in reversed(driver_paths(files, requirements)):
        DRIVER_ONLY_PATHS.add(p)
        if p not in sys.path:
            sys.path.insert(0, p)
    if files:
        out["python.files"] = ",".join(os.path.abspath(os.path.expanduser(f)) for f in split(files))
    if requirements:
        out["python.requirements"] = str(Path(str(requirements)).expanduser().resolve())
    if settings.get("python.archives"):
        out["python.archives"] = ",".join(check_archives(settings["python.archives"]))
    return out
