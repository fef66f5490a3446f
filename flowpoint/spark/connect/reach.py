"""Can a Spark task of this Spark Connect session reach this process? Measured, not assumed.

A continuous run's slots (Spark tasks) open control channels to the process that coordinates
the run. On a classic session that process is Spark's driver, which every executor reaches by
construction. A Spark Connect client is not: it may sit outside the cluster's network (a laptop,
a notebook service behind NAT), and nothing in the Connect protocol says whether the server's
executors can open a connection back to it. So before a continuous job starts, the adapter
listens on the address the run would use, runs one Spark task that connects there and proves it
with a nonce, and waits for it: reached, the job runs continuously; not, it runs in epochs
(``execution.runtime: auto``, saying why) or is refused by name (``continuous``).
"""

from __future__ import annotations

import secrets
import socket
import threading
from typing import Any

CONNECT_TIMEOUT_S = 5.0  # the probing task's connection attempt


def local_address_towards(host: str) -> str:
    """The address of this host on the route to ``host`` (no packet is sent: a UDP socket's
    ``connect`` only picks the route)."""
    family, _, _, _, addr = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        return str(s.getsockname()[0])


def _probe_task(host: str, port: int, nonce: bytes):
    def task(iterator: Any) -> Any:
        import pyarrow as pa

        for _ in iterator:
            pass
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as s:
                s.sendall(nonce)
            error = ""
        except OSError as e:
            error = f"{type(e).__name__}: {e}"
        yield pa.RecordBatch.from_arrays([pa.array([error], pa.string())], names=["error"])

    return task


def unreachable_reason(spark: Any, host: str) -> str | None:
    """None when a Spark task of ``spark`` connected to this process at ``host``; else what
    stopped it (the task's error, or a listener that could not open)."""
    nonce = secrets.token_bytes(16)
    try:
        server = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:
        return f"this process cannot listen on {host} ({e})"
    port = server.getsockname()[1]
    reached = threading.Event()

    def accept() -> None:
        server.settimeout(CONNECT_TIMEOUT_S + 120)
        try:
            while not reached.is_set():
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(CONNECT_TIMEOUT_S)
                    try:
                        if conn.recv(len(nonce), socket.MSG_WAITALL) == nonce:
                            reached.set()
                    except OSError:
                        continue
        except OSError:
            return

    listener = threading.Thread(target=accept, name="flowpoint-reach-probe", daemon=True)
    listener.start()
    try:
        rows = spark.range(0, 1, 1, 1).mapInArrow(_probe_task(host, port, nonce), "error string").collect()
    except Exception as e:  # noqa: BLE001 - the probe's own Spark job failed: say so
        return f"the probing Spark task failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        reached.wait(2.0)
        server.close()
    if reached.is_set():
        return None
    error = rows[0][0] if rows and rows[0][0] else "it connected, but not with this probe's nonce"
    return f"a Spark task could not connect to {host}:{port} ({error})"

