"""Authenticated message channels between the tasks of a continuous job and its driver.

The transport is the standard library's ``multiprocessing.connection``: length-prefixed frames
over TCP (``send_bytes``/``recv_bytes`` with a size limit). What it lacks is an authentication
stronger than Python 3.11's HMAC-MD5 challenge, so every connection starts with a mutual
HMAC-SHA256 challenge over the job's secret (32 random bytes made by the driver for each run)
and the purpose of the connection; a peer that does not know the secret, answers too slowly,
or sends anything else is dropped before it can send a single frame, and the server goes on
accepting. Each side proves it knows the secret, so a task never sends records to a listener
someone else started on a recycled port either.

After the handshake, the connecting side names what the connection carries (its *hello*: a
small tuple, e.g. ``("data", channel)`` or ``("control", task)``); the server hands the
authenticated connection with that hello to its handler, in a thread of its own.

Frames are pickles: both ends are processes of the same job that proved they hold its secret
(as Spark's own shuffle between executors exchanges pickles).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from flowpoint.errors import FlowpointError

log = logging.getLogger("flowpoint")

HANDSHAKE_TIMEOUT_S = 10.0
REFUSAL_WARNING_INTERVAL_S = 60.0  # a refused channel connection warns at most this often
# the kernel's buffers of a channel's socket, each way: what a blocked receiver lets its sender
# queue beyond the receiver's frames (the kernel would otherwise grow them to megabytes)
SOCKET_BUFFER = 64 << 10
MAX_FRAME = 256 << 20  # a frame larger than this is a broken or hostile peer
_HELLO_LIMIT = 4096
_MAGIC = b"flowpoint-channel-1"


class ChannelError(FlowpointError):
    """A channel between the tasks of a continuous job, or to its driver, failed."""


class ChannelAuthError(ChannelError):
    """A peer did not prove that it holds the job's secret."""

    recoverable = False


def new_secret() -> bytes:
    return os.urandom(32)


def _mac(secret: bytes, role: bytes, nonce: bytes, other: bytes) -> bytes:
    return hmac.new(secret, _MAGIC + b"|" + role + b"|" + nonce + b"|" + other, hashlib.sha256).digest()


def _handshake(conn: Connection, secret: bytes, server: bool) -> None:
    """Mutual challenge: each side sends a nonce and answers the other's with an HMAC."""
    mine = os.urandom(32)
    if server:
        conn.send_bytes(_MAGIC + mine)
        theirs = conn.recv_bytes(128)
        if len(theirs) != 64:
            msg = "the peer's answer has the wrong length"
            raise ChannelAuthError(msg)
        their_nonce, their_mac = theirs[:32], theirs[32:]
        if not hmac.compare_digest(their_mac, _mac(secret, b"client", mine, their_nonce)):
            msg = "the peer does not know the job's secret"
            raise ChannelAuthError(msg)
        conn.send_bytes(_mac(secret, b"server", their_nonce, mine))
        return
    first = conn.recv_bytes(128)
    if not first.startswith(_MAGIC) or len(first) != len(_MAGIC) + 32:
        msg = "the listener is not a flowpoint channel"
        raise ChannelAuthError(msg)
    server_nonce = first[len(_MAGIC) :]
    conn.send_bytes(mine + _mac(secret, b"client", server_nonce, mine))
    answer = conn.recv_bytes(64)
    if not hmac.compare_digest(answer, _mac(secret, b"server", mine, server_nonce)):
        msg = "the listener does not know the job's secret"
        raise ChannelAuthError(msg)


class Channel:
    """One authenticated connection: ``send(obj)`` and ``recv()`` of pickled frames."""

    def __init__(self, conn: Connection, peer: str) -> None:
        self.conn = conn
        self.peer = peer
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, obj: Any) -> int:
        """Send one frame; returns the ns spent writing it to the socket (more than a few
        microseconds only while the peer's buffers are full: backpressure)."""
        data = pickle.dumps(obj, protocol=5)
        with self._send_lock:
            t0 = time.perf_counter_ns()
            try:
                self.conn.send_bytes(data)
            except (OSError, ValueError) as e:
                msg = f"sending to {self.peer} failed: {e}"
                raise ChannelError(msg) from e
            return time.perf_counter_ns() - t0

    def recv(self) -> Any:
        try:
            data = self.conn.recv_bytes(MAX_FRAME)
        except EOFError as e:
            msg = f"{self.peer} closed the channel"
            raise ChannelError(msg) from e
        except (OSError, ValueError) as e:
            msg = f"receiving from {self.peer} failed: {e}"
            raise ChannelError(msg) from e
        return pickle.loads(data)  # noqa: S301 - an authenticated peer of the same job

    def poll(self, timeout: float) -> bool:
        try:
            return self.conn.poll(timeout)
        except (OSError, ValueError, EOFError):
            return True  # recv() reports it

    def close(self) -> None:
        self.closed = True
        try:
            self.conn.close()
        except OSError:
            pass


def connect(address: tuple[str, int], secret: bytes, hello: tuple, timeout: float = HANDSHAKE_TIMEOUT_S) -> Channel:
    """An authenticated channel to the listener at ``address``, announced with ``hello``."""
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
        _small_buffers(sock)
        sock.settimeout(timeout)
        sock.connect(address)
    except OSError as e:
        msg = f"could not connect to {address[0]}:{address[1]}: {e}"
        raise ChannelError(msg) from e
    sock.settimeout(None)  # Connection reads the descriptor itself: it must stay blocking
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _os_timeout(sock, timeout)
    conn = Connection(sock.detach())
    peer = f"{address[0]}:{address[1]}"
    try:
        _handshake(conn, secret, server=False)
        conn.send_bytes(pickle.dumps(hello, protocol=5))
    except (OSError, EOFError) as e:
        conn.close()
        msg = f"the handshake with {peer} failed: {e}"
        raise ChannelError(msg) from e
    except ChannelAuthError:
        conn.close()
        raise
    _os_timeout(conn, 0)
    return Channel(conn, peer)


def _small_buffers(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)


def _os_timeout(sock_or_conn: Any, seconds: float) -> None:
    """The kernel's send and receive timeouts (0: none) on a blocking socket: a peer that stalls
    makes a read or write fail with an OSError instead of blocking its thread for ever."""
    fd = sock_or_conn.fileno()
    s = socket.socket(fileno=os.dup(fd)) if isinstance(sock_or_conn, Connection) else sock_or_conn
    try:
        tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1_000_000))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    finally:
        if s is not sock_or_conn:
            s.detach()


class ChannelServer:
    """Listens on ``host`` (port 0: any free port) for authenticated channels of one job.

    ``handler(hello, channel)`` runs in a thread per connection once the peer has proved it
    holds the secret. Refused connections are counted in ``refused``; the server never stops
    because of a peer."""

    def __init__(self, host: str, secret: bytes, handler: Callable[[tuple, Channel], None], name: str = "flowpoint-channels") -> None:
        self.secret = secret
        self.handler = handler
        self.refused = 0
        self._unreported = 0  # refusals logged at debug level since the last warning
        self._warned = -REFUSAL_WARNING_INTERVAL_S
        self._closed = threading.Event()
        self._sock = socket.create_server((host, 0))
        _small_buffers(self._sock)  # accepted sockets inherit them
        self.address: tuple[str, int] = (host, self._sock.getsockname()[1])
        self._threads: list[threading.Thread] = []
        self._conns: list[Channel] = []
        self._lock = threading.Lock()
        self._accept = threading.Thread(target=self._accept_loop, name=name, daemon=True)
        self._accept.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, addr = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(sock, addr), name="flowpoint-channel-peer", daemon=True)
            t.start()

    def _serve(self, sock: socket.socket, addr: Any) -> None:
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _os_timeout(sock, HANDSHAKE_TIMEOUT_S)  # a peer that stalls the handshake is dropped
        conn = Connection(sock.detach())
        peer = f"{addr[0]}:{addr[1]}"
        try:
            _handshake(conn, self.secret, server=True)
            hello = pickle.loads(conn.recv_bytes(_HELLO_LIMIT))  # noqa: S301 - after the peer proved the secret
            if not isinstance(hello, tuple):
                msg = "the hello is not a tuple"
                raise ChannelAuthError(msg)
        except (EOFError, OSError) as e:  # the peer went away or stalled: it sent nothing to refuse
            with self._lock:
                self.refused += 1
            log.debug("a channel connection from %s ended during the handshake: %s", peer, e or type(e).__name__)
            conn.close()
            return
        except (ChannelAuthError, pickle.UnpicklingError, ValueError, TypeError) as e:
            self._refused(peer, e)
            conn.close()
            return
        _os_timeout(conn, 0)
        channel = Channel(conn, peer)
        with self._lock:
            if self._closed.is_set():
                channel.close()
                return
            self._conns.append(channel)
        try:
            self.handler(hello, channel)
        except Exception:  # noqa: BLE001 - the handler reports its own failures
            log.debug("channel handler for %s ended with an error", peer, exc_info=True)

    def _refused(self, peer: str, error: BaseException) -> None:
        """One warning a minute at most, with the count of refusals since the last one (a local
        user connecting in a loop cannot fill the job's output); the others at debug level."""
        now = time.monotonic()
        with self._lock:
            self.refused += 1
            self._unreported += 1
            if now - self._warned < REFUSAL_WARNING_INTERVAL_S:
                quiet = True
            else:
                quiet, count, self._unreported, self._warned = False, self._unreported, 0, now
        if quiet:
            log.debug("flowpoint refused a channel connection from %s: %s", peer, error)
            return
        more = f" ({count - 1} more refused since the last warning)" if count > 1 else ""
        log.warning("flowpoint refused a channel connection from %s: %s%s", peer, error, more)

    def close(self) -> None:
        self._closed.set()
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
