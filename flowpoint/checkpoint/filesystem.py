"""Checkpoint storage: one directory tree on a filesystem that pyarrow (or fsspec) can open.

:class:`CheckpointStorageAccess` is rooted at a URI and takes paths relative to that root
(``"chk-7/_metadata"``, never absolute, never ``..``):

- ``file:///abs/path`` or a bare local path (relative paths are made absolute),
- ``s3://bucket/prefix`` (also ``s3a://``): pyarrow's S3FileSystem. Credentials and region come
  from the standard AWS environment variables / config files; the endpoint from the option
  ``s3.endpoint`` or ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (e.g. a local MinIO or moto),
- ``hdfs://namenode:port/path``: pyarrow's HadoopFileSystem,
- ``memory://name/path``: one in-memory filesystem per process (fsspec's MemoryFileSystem). This
  is JobManagerCheckpointStorage: it lives in the driver and is lost with it; other processes
  (Spark executors) see an empty one.
- any other URI pyarrow's ``FileSystem.from_uri`` or fsspec opens.

Writes are atomic: on filesystems with rename (local, HDFS, memory) data goes to a hidden
temporary file beside the target and is renamed over it (local files are fsynced first); on
object stores an upload (a single PUT for small objects) only becomes visible when complete.
Every failure raises :class:`~flowpoint.errors.CheckpointError` naming the URI and saying what
to do.

Local files (``file://``) are created with mode 0600 and directories with 0700, whatever the
umask, unless the option ``state.checkpoints.file-mode`` allows more (``0640``: directories
``0750``); :meth:`CheckpointStorageAccess.check_trusted` refuses a local directory another user
owns or can write (``security.trust-shared-directories: true`` accepts it). Other filesystems
keep their own permissions.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from flowpoint import private_files
from flowpoint.errors import CheckpointError

CHUNK = 8 * 1024 * 1024
TEMP_SUFFIX = ".inprogress"
OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "oss"})
FILE_MODE_OPTION = "state.checkpoints.file-mode"
TRUST_OPTION = private_files.TRUST_SHARED


def is_temp_name(name: str) -> bool:
    """A hidden temporary file of an atomic write still in progress (or abandoned)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def _join(base: str, rel: str) -> str:
    if not rel:
        return base
    if not base:
        return rel
    return base + rel if base.endswith("/") else base + "/" + rel


def _check_rel(rel: str) -> str:
    rel = (rel or "").strip("/") if rel is not None else ""
    if rel.startswith("~") or "\\" in rel:
        msg = f"checkpoint storage path {rel!r} must be a plain relative path with '/' separators"
        raise CheckpointError(msg)
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        msg = f"checkpoint storage path {rel!r} must not contain '..': paths are relative to the storage root"
        raise CheckpointError(msg)
    return "/".join(parts)


def _s3_filesystem(options: Mapping[str, Any]) -> pafs.S3FileSystem:
    env = os.environ
    endpoint = options.get("s3.endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {}
    access_key = options.get("s3.access-key")
    secret_key = options.get("s3.secret-key")
    if access_key or secret_key:
        kwargs["access_key"] = access_key
        kwargs["secret_key"] = secret_key
        if options.get("s3.session-token"):
            kwargs["session_token"] = options["s3.session-token"]
    region = options.get("s3.region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        kwargs["scheme"] = parts.scheme or "https"
        region = region or "us-east-1"  # a custom endpoint: no region lookup (it would ask EC2)
    if region:
        kwargs["region"] = region
    kwargs["connect_timeout"] = float(options.get("s3.connect-timeout", 5))
    kwargs["request_timeout"] = float(options.get("s3.request-timeout", 30))
    kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=int(options.get("s3.max-attempts", 3)))
    kwargs["allow_delayed_open"] = True  # small objects: one PutObject at close, no multipart upload
    if str(options.get("s3.path.style.access", "")).lower() == "false":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def _memory_filesystem() -> pafs.FileSystem:
    try:
        from fsspec.implementations.memory import MemoryFileSystem
    except ImportError as e:  # pragma: no cover - fsspec is a dependency
        msg = "memory:// checkpoint storage (JobManagerCheckpointStorage) needs fsspec: pip install fsspec"
        raise CheckpointError(msg) from e
    # MemoryFileSystem keeps its files in a class-level dict: one store per process.
    return pafs.PyFileSystem(pafs.FSSpecHandler(MemoryFileSystem()))


def _open(uri: str, options: Mapping[str, Any]) -> tuple[pafs.FileSystem, str, str, str]:
    """(filesystem, root path on it, normalized root URI, scheme) for a storage URI or local path."""
    if not uri or not str(uri).strip():
        msg = "checkpoint storage needs a directory URI (file:///path, s3://bucket/prefix, hdfs://..., memory://...)"
        raise CheckpointError(msg)
    uri = os.fspath(uri).strip()
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                msg = f"{uri}: file URIs name a local path (file:///abs/path); the host {parts.netloc!r} is not supported"
                raise CheckpointError(msg)
            path = unquote(parts.path)
        else:
            path = uri
        path = os.path.abspath(os.path.expanduser(path))
        return pafs.LocalFileSystem(), path, "file://" + path, "file"
    if scheme in ("s3", "s3a"):
        if not parts.netloc:
            msg = f"{uri}: an S3 URI names a bucket: s3://bucket/prefix"
            raise CheckpointError(msg)
        root = (parts.netloc + parts.path).rstrip("/")
        return _s3_filesystem(options), root, f"{scheme}://{root}", "s3"
    if scheme == "memory":
        name = (parts.netloc + parts.path).strip("/")
        return _memory_filesystem(), "/" + name, f"memory://{name}", "memory"
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError, ValueError) as e:
        try:
            import fsspec

            fsspec_fs, path = fsspec.core.url_to_fs(uri)
        except Exception as e2:  # noqa: BLE001 - report both openers' reasons
            msg = f"cannot open checkpoint storage {uri}: {e} / {e2}. Use file://, s3://, hdfs:// or memory://, or install the fsspec filesystem for {scheme}://"
            raise CheckpointError(msg) from e
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_fs))
    return fs, path.rstrip("/") or "/", uri.rstrip("/"), scheme


@contextlib.contextmanager
def storage_errors(access: CheckpointStorageAccess, action: str, rel: str) -> Iterator[None]:
    """A failure to ``action`` the file ``rel`` of ``access`` as a CheckpointError that names
    its URI and what to check (a missing file, a denied permission, an unreachable store)."""
    try:
        yield
    except CheckpointError:
        raise
    except FileNotFoundError as e:
        msg = f"cannot {action} {access.uri(rel)}: it does not exist. Check the path (and that the checkpoint was not deleted by retention)"
        raise CheckpointError(msg) from e
    except PermissionError as e:
        msg = f"cannot {action} {access.uri(rel)}: permission denied ({e}). Grant the job's user access to the checkpoint directory"
        raise CheckpointError(msg) from e
    except (OSError, pa.ArrowException, ValueError) as e:
        text = str(e)
        if "ACCESS_DENIED" in text or "AccessDenied" in text or "403" in text:
            hint = "the credentials lack access: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the s3.access-key option) and the bucket policy"
        elif "NoSuchBucket" in text or ("Bucket" in text and "not found" in text):
            hint = "the bucket does not exist: create it first"
        elif "NETWORK_CONNECTION" in text or "connect" in text.lower() or "timed out" in text.lower() or "resolve" in text.lower():
            hint = "the storage endpoint is unreachable: check the URI, the endpoint (s3.endpoint / AWS_ENDPOINT_URL) and the network, then retry"
        else:
            hint = "check that the storage is reachable and writable, then retry"
        msg = f"cannot {action} {access.uri(rel)}: {type(e).__name__}: {text.strip()}; {hint}"
        raise CheckpointError(msg) from e


class CheckpointStorageAccess:
    """Reads and writes files under one root URI; paths are relative to that root."""

    def __init__(self, uri: str | os.PathLike, options: Mapping[str, Any] | None = None):
        self.options: dict[str, Any] = dict(options or {})
        self.fs, self.root, self.root_uri, self.scheme = _open(os.fspath(uri), self.options)

    @classmethod
    def from_uri(cls, uri: str | os.PathLike, options: Mapping[str, Any] | None = None) -> CheckpointStorageAccess:
        return cls(uri, options)

    def child(self, rel: str) -> CheckpointStorageAccess:
        """An access rooted at ``rel`` below this one (same filesystem object)."""
        rel = _check_rel(rel)
        other = object.__new__(CheckpointStorageAccess)
        other.options = dict(self.options)
        other.fs, other.scheme = self.fs, self.scheme
        other.root = _join(self.root, rel)
        other.root_uri = _join(self.root_uri, rel)
        return other

    @property
    def name(self) -> str:
        """The last component of the root (e.g. the job id of a job's directory)."""
        return posixpath.basename(self.root.rstrip("/"))

    def __reduce__(self):  # re-open from the URI in another process (memory:// is then empty)
        return (CheckpointStorageAccess, (self.root_uri, self.options))

    def __repr__(self) -> str:
        return f"CheckpointStorageAccess({self.root_uri!r})"

    # -- paths ---------------------------------------------------------------------------------

    def uri(self, rel: str = "") -> str:
        return _join(self.root_uri, _check_rel(rel))

    def _path(self, rel: str) -> str:
        return _join(self.root, _check_rel(rel))

    @property
    def is_object_store(self) -> bool:
        return self.scheme in OBJECT_STORE_SCHEMES

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    # -- local permissions ---------------------------------------------------------------------

    @property
    def file_mode(self) -> int:
        """The mode of new local files: ``state.checkpoints.file-mode`` (octal), default 0600."""
        return int(str(self.options.get(FILE_MODE_OPTION) or "0600"), 8)

    @property
    def dir_mode(self) -> int:
        """The mode of new local directories: the file mode, searchable where it is readable."""
        mode = self.file_mode
        return mode | (mode & 0o444) >> 2

    def check_trusted(self, what: str, setting: str, create: bool = False) -> None:
        """A local root directory (and what exists of it, when missing; created first when
        ``create``) that another user owns or can write, or can replace through a parent
        directory or a symbolic link, is refused with InsecurePathError naming it and ``setting``
        (``private_files.check_dir``), unless ``security.trust-shared-directories`` is true.
        Other filesystems: their own access control applies."""
        if not self.is_local or str(self.options.get(TRUST_OPTION, "")).lower() == "true":
            return
        hint = (
            f"choose a directory of your own ({setting}), or set {TRUST_OPTION}: true if you trust every user "
            "who can write it with running code as you"
        )
        private_files.check_dir(self.root, what, hint, create, self.dir_mode)

    # -- writing -------------------------------------------------------------------------------

    def _ensure_parent(self, path: str) -> None:
        if self.is_object_store:
            return  # object stores have no directories to create
        parent = posixpath.dirname(path)
        if parent and parent != path:
            self._create_dir(parent)

    def _create_dir(self, path: str) -> None:
        if self.is_local:
            private_files.makedirs(path, self.dir_mode)  # the mode whatever the umask
        else:
            self.fs.create_dir(path, recursive=True)

    def _atomic_write(self, rel: str, write: Callable[[Any], None]) -> None:
        """Make ``rel`` hold exactly what ``write(stream)`` writes, or leave it as it was."""
        rel = _check_rel(rel)
        if not rel:
            msg = f"cannot write {self.root_uri}: a file path below the storage root is needed"
            raise CheckpointError(msg)
        target = self._path(rel)
        with storage_errors(self, "write", rel):
            self._ensure_parent(target)
            if self.is_object_store:
                # One upload (a single PUT for small objects): the object becomes visible only
                # when it completes, and a failed upload is aborted. pyarrow cannot abort from
                # Python, though: if ``write`` itself raises midway, closing publishes what was
                # written, so the object is deleted again (it is a fresh name in practice:
                # _metadata is never overwritten, data files have unique names).
                try:
                    with self.fs.open_output_stream(target) as out:
                        write(out)
                except BaseException:
                    with contextlib.suppress(Exception):
                        self.fs.delete_file(target)
                    raise
                return
            tmp = _join(posixpath.dirname(target), f".{posixpath.basename(target)}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}")
            try:
                with self.fs.open_output_stream(tmp) as out:
                    if self.is_local:
                        os.chmod(tmp, self.file_mode)  # before any byte is in it, whatever the umask
                    write(out)
                if self.is_local:
                    _fsync_path(tmp)
                if self.scheme == "hdfs" and self.fs.get_file_info(target).type != pafs.FileType.NotFound:
                    self.fs.delete_file(target)  # HDFS rename does not replace
                self.fs.move(tmp, target)
                if self.is_local:
                    _fsync_path(posixpath.dirname(target), directory=True)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.fs.delete_file(tmp)
                raise

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` atomically (readers see the old file or the whole new one)."""
        view = memoryview(data)

        def write(out: Any) -> None:
            for start in range(0, len(view), CHUNK):
                out.write(view[start : start + CHUNK])

        self._atomic_write(rel, write)

    def upload_file(self, local_path: str | os.PathLike, rel: str) -> None:
        """Copy a local file to ``rel`` (streamed, atomically)."""
        local_path = os.fspath(local_path)
        try:
            src: BinaryIO = open(local_path, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            msg = f"cannot upload {local_path} to {self.uri(rel)}: {e}"
            raise CheckpointError(msg) from e
        with src:
            self._atomic_write(rel, lambda out: shutil.copyfileobj(src, out, CHUNK))

    # -- reading -------------------------------------------------------------------------------

    def read_bytes(self, rel: str) -> bytes:
        with storage_errors(self, "read", rel), self.fs.open_input_stream(self._path(rel)) as f:
            return f.readall()

    def sha256(self, rel: str) -> tuple[int, str]:
        """``(size, SHA-256 hex)`` of the file ``rel``, streamed (constant memory)."""
        h = hashlib.sha256()
        size = 0
        with storage_errors(self, "read", rel), self.fs.open_input_stream(self._path(rel)) as f:
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
        return size, h.hexdigest()

    def download_file(self, rel: str, local_path: str | os.PathLike) -> None:
        """Copy ``rel`` to a local file (streamed; the local file appears complete or not at all)."""
        local_path = os.fspath(local_path)
        directory = os.path.dirname(os.path.abspath(local_path))
        tmp = os.path.join(directory, f".{os.path.basename(local_path)}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}")
        try:
            os.makedirs(directory, exist_ok=True)
            with storage_errors(self, "download", rel), self.fs.open_input_stream(self._path(rel)) as src, open(tmp, "wb") as dst:
                while True:
                    chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    dst.write(chunk)
            os.replace(tmp, local_path)
        except OSError as e:
            msg = f"cannot download {self.uri(rel)} to {local_path}: {e}"
            raise CheckpointError(msg) from e
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)

    def _info(self, rel: str) -> pafs.FileInfo:
        with storage_errors(self, "access", rel):
            return self.fs.get_file_info(self._path(rel))

    def exists(self, rel: str = "") -> bool:
        return self._info(rel).type != pafs.FileType.NotFound

    def is_dir(self, rel: str = "") -> bool:
        return self._info(rel).type == pafs.FileType.Directory

    def list_dir(self, rel: str = "") -> list[tuple[str, bool, int]]:
        """``(name, is_dir, size)`` of the entries of directory ``rel`` (size 0 for directories),
        sorted by name; temporary files of writes in progress are left out."""
        path = self._path(rel)
        with storage_errors(self, "list", rel):
            infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=False))
        out = []
        for info in infos:
            name = posixpath.basename(info.path.rstrip("/"))
            if not name or is_temp_name(name):
                continue
            is_dir = info.type == pafs.FileType.Directory
            out.append((name, is_dir, 0 if is_dir else int(info.size or 0)))
        return sorted(out)

    def size_of(self, rel: str = "") -> int:
        """Bytes of the file ``rel``, or of all files below the directory ``rel``."""
        info = self._info(rel)
        if info.type == pafs.FileType.NotFound:
            msg = f"cannot measure {self.uri(rel)}: it does not exist"
            raise CheckpointError(msg)
        if info.type != pafs.FileType.Directory:
            return int(info.size or 0)
        with storage_errors(self, "list", rel):
            infos = self.fs.get_file_info(pafs.FileSelector(self._path(rel), recursive=True))
        return sum(int(i.size or 0) for i in infos if i.type == pafs.FileType.File)

    def mtime_ms(self, rel: str = "") -> int | None:
        """Modification time of ``rel`` (newest file below it for a directory), if known."""
        info = self._info(rel)
        if info.type == pafs.FileType.NotFound:
            return None
        infos = [info]
        if info.type == pafs.FileType.Directory:
            with storage_errors(self, "list", rel):
                infos = self.fs.get_file_info(pafs.FileSelector(self._path(rel), recursive=True)) or [info]
        times = [i.mtime_ns // 1_000_000 for i in infos if i.mtime_ns is not None]
        if not times and isinstance(self.fs, pafs.PyFileSystem):  # fsspec's memory fs: "created"
            inner = getattr(getattr(self.fs, "handler", None), "fs", None)
            for i in infos:
                with contextlib.suppress(Exception):
                    created = inner.info(i.path).get("created")
                    if isinstance(created, (int, float)):
                        times.append(int(created * 1000))
                    elif hasattr(created, "timestamp"):
                        times.append(int(created.timestamp() * 1000))
        return max(times) if times else None

    # -- changing ------------------------------------------------------------------------------

    def make_dirs(self, rel: str = "") -> None:
        """Create directory ``rel`` and its parents (on object stores an empty marker object)."""
        with storage_errors(self, "create directory", rel):
            self._create_dir(self._path(rel))

    def delete(self, rel: str) -> None:
        """Delete file or directory ``rel`` (recursively); a missing path is fine."""
        info = self._info(rel)
        with storage_errors(self, "delete", rel):
            if info.type == pafs.FileType.Directory:
                self.fs.delete_dir(self._path(rel))
            elif info.type != pafs.FileType.NotFound:
                try:
                    self.fs.delete_file(self._path(rel))
                except FileNotFoundError:
                    pass


    def delete_empty_dir(self, rel: str = "") -> bool:
        """Delete directory ``rel`` only if nothing is in it (temporary files included); returns
        whether it went."""
        path = self._path(rel)
        with storage_errors(self, "delete", rel):
            if self.is_local:
                try:
                    os.rmdir(path)
                except OSError as e:
                    if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                        return False
                    raise
                return True
            info = self.fs.get_file_info(path)
            if info.type != pafs.FileType.Directory or self.fs.get_file_info(pafs.FileSelector(path, recursive=False)):
                return False
            self.fs.delete_dir(path)
            return True


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def split_uri(uri: str | os.PathLike) -> tuple[str, str]:
    """``(parent URI, last name)`` of a URI or local path: ``s3://b/p/f`` -> ``("s3://b/p", "f")``."""
    text = os.fspath(uri).rstrip("/")
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", text)
    prefix, rest = (m.group(1), m.group(2)) if m else ("", text)
    head, sep, name = rest.rpartition("/")
    if not name or name in (".", ".."):
        msg = f"{os.fspath(uri)!r} does not name a file or directory below a parent directory"
        raise CheckpointError(msg)
    if not sep:
        return (prefix or "."), name
    return prefix + (head or "/"), name


def read_uri_bytes(uri: str, options: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of one file named by its full URI (or local path)."""
    parent, name = split_uri(uri)
    return CheckpointStorageAccess(parent, options).read_bytes(name)
