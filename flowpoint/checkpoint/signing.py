"""Who wrote a checkpoint or savepoint: ``_metadata`` signed with the installation's key
(docs/checkpoints.md, "Integrity and trust"; docs/architecture.md, section 10a).

``metadata_sha256`` tells a damaged ``_metadata`` from an intact one, but anyone who can write
checkpoint storage (the other writers of an S3 bucket, a shared NFS export) can compute it too:
they could replace a state file with a pickle that runs a command, record the new file's size
and SHA-256 in ``_metadata`` and reseal it, and the command would run as the job's user on
restore. So ``_metadata`` also carries ``metadata_hmac``::

    "metadata_hmac": {"alg": "HMAC-SHA256", "key_id": "<16 hex>", "mac": "<64 hex>"}

``mac`` is HMAC-SHA256, under the installation's secret key, of ``DOMAIN`` followed by the
SHA-256 of the file's canonical form without ``metadata_sha256`` and ``metadata_hmac``
(:func:`signed_digest`). It covers everything else: every state file's path, size and SHA-256,
source positions, sink and operator state, watermarks. ``key_id`` names the key (a hash of it,
which reveals nothing of it) so that a refusal can say whose key signed the file.
``metadata_sha256`` is computed last, over the signature too.

**The key** is 32 random bytes, hex, in ``$FLOWPOINT_HOME/checkpoint-key`` (``~/.flowpoint``),
created (mode 0600, atomically) the first time a checkpoint or savepoint is written or
restored. ``security.checkpoint-signing.key-file`` names another file: the same key on another
machine, e.g. for a driver that runs on a cluster node (``spark-submit --deploy-mode cluster``;
docs/deployment.md). A key file must be a regular file (not a link) owned by you (or root) that
no other user can read or write, in a ``FLOWPOINT_HOME`` only you can change; anything else is
refused with :class:`~flowpoint.errors.InsecurePathError`. Only the driver signs and verifies:
tasks write their parts and return SHA-256 sums, and read only files whose SHA-256 the driver
took from a verified ``_metadata`` (the State Processor API's tasks too), so the key never
travels to executors.

**A restore** (``-s``, ``--resume``, a restart, ``state_reader``, a native savepoint's copy)
verifies the signature before anything is decoded (:meth:`Keyring.verify`). It accepts a file
signed with this installation's key, or with a key named in
``security.checkpoint-signing.trusted-key-files`` (another installation whose savepoints you
restore). Anything else (signed with another key, changed after it was signed, or unsigned:
written by a flowpoint before signatures, or with the signature removed) is refused with
:class:`~flowpoint.errors.UntrustedStateError` naming the file, unless
``execution.savepoint.trust-from-others`` (``flowpoint run --trust-savepoint-from-others``) is
set: restoring runs whatever the file's writer put in its pickles.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import logging
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any

from flowpoint.checkpoint.integrity import CHECKSUM_FIELD, canonical_bytes, metadata_checksum
from flowpoint.errors import ConfigurationError, InsecurePathError, UntrustedStateError
from flowpoint.home import check_home, flowpoint_home

log = logging.getLogger("flowpoint")

SIGNATURE_FIELD = "metadata_hmac"
ALGORITHM = "HMAC-SHA256"
DOMAIN = b"flowpoint checkpoint metadata v1\n"
KEY_FILE = "checkpoint-key"
KEY_BYTES = 32
KEY_FILE_OPTION = "security.checkpoint-signing.key-file"
TRUSTED_KEYS_OPTION = "security.checkpoint-signing.trusted-key-files"
TRUST_OPTION = "execution.savepoint.trust-from-others"
TRUST_FLAG = "--trust-savepoint-from-others"


def signed_digest(d: dict[str, Any]) -> bytes:
    """SHA-256 of ``_metadata``'s canonical form without its checksum and signature: what the
    signature covers."""
    return hashlib.sha256(canonical_bytes({k: v for k, v in d.items() if k not in (CHECKSUM_FIELD, SIGNATURE_FIELD)})).digest()


@dataclass(frozen=True)
class SigningKey:
    """A secret key and the file it came from."""

    secret: bytes = field(repr=False)
    path: str

    @property
    def key_id(self) -> str:
        """16 hex characters naming the key (a hash of it: reveals nothing of the key)."""
        return hashlib.sha256(b"flowpoint key id\n" + self.secret).hexdigest()[:16]

    def mac(self, digest: bytes) -> str:
        return hmac.new(self.secret, DOMAIN + digest, hashlib.sha256).hexdigest()

    def signature(self, d: dict[str, Any]) -> dict[str, str]:
        """The ``metadata_hmac`` value for the ``_metadata`` object ``d``."""
        return {"alg": ALGORITHM, "key_id": self.key_id, "mac": self.mac(signed_digest(d))}

    def matches(self, signature: Any, digest: bytes) -> bool:
        return isinstance(signature, dict) and isinstance(signature.get("mac"), str) and hmac.compare_digest(signature["mac"], self.mac(digest))


# -- key files ---------------------------------------------------------------------------------


def default_key_path() -> str:
    return str(flowpoint_home() / KEY_FILE)


def _check_key_file(fd: int, path: str) -> None:
    if os.name != "posix":
        return
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        msg = f"the checkpoint signing key {path} is not a regular file: refused. Remove it (a new key is made on first use) or set {KEY_FILE_OPTION}"
        raise InsecurePathError(msg)
    if st.st_uid not in (os.geteuid(), 0):
        msg = (
            f"the checkpoint signing key {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): whoever chose it "
            f"can sign checkpoints your jobs would restore (and run code as you). Remove it, or set {KEY_FILE_OPTION}"
        )
        raise InsecurePathError(msg)
    if st.st_mode & 0o077:
        msg = (
            f"the checkpoint signing key {path} can be read or written by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"whoever reads it can sign checkpoints your jobs would restore. Run `chmod 600 {path}` (and, if others may "
            "have read it, remove it: checkpoints signed with it then need --trust-savepoint-from-others)"
        )
        raise InsecurePathError(msg)


def read_key(path: str) -> SigningKey:
    """The key in ``path`` (64 hex characters), checked (owner, mode, not a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            msg = f"the checkpoint signing key {path} is a symbolic link: refused. Name the file itself ({KEY_FILE_OPTION})"
            raise InsecurePathError(msg) from None
        raise
    try:
        _check_key_file(fd, path)
        text = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < KEY_BYTES:
        msg = f"the checkpoint signing key {path} is not {KEY_BYTES * 2} hex characters: it is damaged. Restore it from a copy, or remove it (checkpoints signed with it then need {TRUST_FLAG})"
        raise InsecurePathError(msg)
    return SigningKey(secret, path)


def load_or_create_default_key() -> SigningKey:
    """``$FLOWPOINT_HOME/checkpoint-key``, created (0600, atomically: concurrent first jobs
    agree on one key) when there is none; FLOWPOINT_HOME is checked first (private_files)."""
    path = default_key_path()
    check_home(create=True)
    with contextlib.suppress(FileNotFoundError):
        return read_key(path)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-key.", dir=os.path.dirname(path))  # mode 0600
    try:
        os.write(fd, (secrets.token_hex(KEY_BYTES) + "\n").encode("ascii"))
        os.close(fd)
        fd = -1
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # never replaces a key another job already signs with
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(tmp)
    return read_key(path)


def _configured_key(path: str, what: str) -> SigningKey:
    path = os.path.abspath(os.path.expanduser(path))
    try:
        return read_key(path)
    except FileNotFoundError:
        msg = f"{what} {path} does not exist: copy the key file there (mode 0600), or unset the setting"
        raise ConfigurationError(msg) from None
    except InsecurePathError:
        raise
    except OSError as e:
        msg = f"cannot read {what} {path}: {e.strerror or e}"
        raise ConfigurationError(msg) from e


# -- signing and verifying ---------------------------------------------------------------------


class Keyring:
    """This installation's key (signs and verifies) and the keys of other installations whose
    checkpoints and savepoints are accepted, from the job's configuration. Keys are read on
    first use: a job that neither checkpoints nor restores never creates one."""

    def __init__(self, key_file: str | None = None, trusted_key_files: tuple[str, ...] = (), trust_others: bool = False):
        self.key_file = key_file or None
        self.trusted_key_files = tuple(p for p in trusted_key_files if p)
        self.trust_others = bool(trust_others)
        self._own: SigningKey | None = None
        self._trusted: list[SigningKey] | None = None

    @classmethod
    def from_config(cls, config: Any) -> Keyring:
        get = config.get if config is not None else (lambda _k, _d=None: None)
        trusted = get(TRUSTED_KEYS_OPTION) or ()
        if isinstance(trusted, str):
            trusted = tuple(p.strip() for p in trusted.split(",") if p.strip())
        return cls(get(KEY_FILE_OPTION), tuple(trusted), bool(get(TRUST_OPTION)))

    @property
    def own(self) -> SigningKey:
        if self._own is None:
            self._own = _configured_key(self.key_file, f"the checkpoint signing key ({KEY_FILE_OPTION})") if self.key_file else load_or_create_default_key()
        return self._own

    @property
    def trusted(self) -> list[SigningKey]:
        if self._trusted is None:
            self._trusted = [_configured_key(p, f"the trusted key file ({TRUSTED_KEYS_OPTION})") for p in self.trusted_key_files]
        return self._trusted

    def sign(self, d: dict[str, Any]) -> dict[str, str]:
        return self.own.signature(d)

    def verify(self, meta: Any, uri: str) -> None:
        """Accept ``meta`` (read from ``uri``, a ``_metadata`` file) if it is signed with this
        installation's key or a trusted one, or if ``trust_others``; else raise
        UntrustedStateError naming the file and saying how to proceed. Metadata this process
        wrote itself (never read back) is accepted."""
        signature, digest = getattr(meta, "signature", None), getattr(meta, "signed_digest", None)
        if digest is None:
            return  # built in this process (the job's own checkpoint, kept in memory)
        own = self.own
        if own.matches(signature, digest) or any(k.matches(signature, digest) for k in self.trusted):
            return
        problem = _problem(signature, own, self.trusted)
        if self.trust_others:
            log.warning("restoring %s although it %s (%s is set)", uri, problem, TRUST_OPTION)
            return
        risk = (
            "Restoring it would unpickle whatever its writer put in it, as you: anyone who can write checkpoint storage could "
            "have written it"
        )
        if isinstance(signature, dict) and signature.get("key_id") not in (own.key_id, *(k.key_id for k in self.trusted)):
            how = (
                f"If you trust that installation, add a copy of its key file to {TRUSTED_KEYS_OPTION}, or restore once with "
                f"`flowpoint run {TRUST_FLAG} -s ...` ({TRUST_OPTION}: true) and take a new savepoint, which this "
                "installation signs"
            )
        else:
            how = (
                f"If you know who wrote it and trust them, restore it with `flowpoint run {TRUST_FLAG} -s ...` "
                f"({TRUST_OPTION}: true) and take a new savepoint, which this installation signs; otherwise restore "
                "another checkpoint or savepoint"
            )
        msg = f"{uri} {problem}. {risk}. {how}"
        raise UntrustedStateError(msg, path=uri)


def _problem(signature: Any, own: SigningKey, trusted: list[SigningKey]) -> str:
    if signature is None:
        return (
            "carries no signature (metadata_hmac): it was written by a flowpoint from before checkpoints were signed, "
            "or someone removed the signature"
        )
    key_id = signature.get("key_id") if isinstance(signature, dict) else None
    if key_id == own.key_id or any(key_id == k.key_id for k in trusted):
        return (
            f"does not match its signature (metadata_hmac, key {key_id}): it was changed after flowpoint signed it "
            "(its state files or values replaced and the file resealed)"
        )
    return (
        f"is signed by another flowpoint installation (key {key_id!s:.32}), not with this one's key ({own.key_id}, "
        f"{own.path}{''.join(', ' + k.path for k in trusted)})"
    )


def default_keyring() -> Keyring:
    """A keyring with the defaults (``$FLOWPOINT_HOME/checkpoint-key``), for code without a
    job configuration (the state writer, tools)."""
    return Keyring()


def seal(d: dict[str, Any], keyring: Keyring | None = None) -> dict[str, Any]:
    """``d`` (a ``_metadata`` object) signed with ``keyring``'s key (default: this
    installation's) and checksummed as flowpoint writes it: for the owner's own tools and
    tests that edit a ``_metadata`` file."""
    out = {k: v for k, v in d.items() if k not in (CHECKSUM_FIELD, SIGNATURE_FIELD)}
    out[SIGNATURE_FIELD] = (keyring or default_keyring()).sign(out)
    out[CHECKSUM_FIELD] = metadata_checksum(out)
    return out
