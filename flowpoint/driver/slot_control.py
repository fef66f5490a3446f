"""The driver's end of a continuous run's control channels (docs/architecture.md, section 4b).

Every slot of the run connects to one listener the driver opens for the run (on
``spark.driver.host``, 127.0.0.1 for ``local*`` masters), authenticated with the run's secret
(flowpoint/tasks/channels.py). The slots' messages (read assignments done, barrier
acknowledgements, live sink output, metrics, failures) arrive in one queue the continuous loop
drains; commands go back on the same channels.
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Callable
from typing import Any

from flowpoint.errors import ConfigurationError, JobExecutionError
from flowpoint.tasks.channels import Channel, ChannelError, ChannelServer, new_secret

CONNECT_TIMEOUT_S = 180.0

Handle = Callable[[int, tuple], None]


class SlotControl:
    def __init__(self, slots: int, host: str) -> None:
        self.slots = slots
        self.messages: queue.Queue = queue.Queue()
        self.controls: dict[int, Channel] = {}
        self.slot_addresses: dict[int, str] = {}
        self.closed = False
        self.secret = new_secret()
        self.server = ChannelServer(host, self.secret, self._control, name="flowpoint-driver-control")

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def _control(self, hello: tuple, channel: Channel) -> None:
        """A slot's control channel: its messages go to the loop's queue."""
        index = hello[1] if len(hello) == 2 else None
        if hello[0] != "control" or not isinstance(index, int) or not 0 <= index < self.slots or index in self.controls:
            channel.close()
            return
        self.controls[index] = channel
        self.messages.put((index, ("connected",)))
        try:
            while True:
                self.messages.put((index, channel.recv()))
        except ChannelError as e:
            self.messages.put((index, ("lost", str(e))))

    def await_slots(self, check: Callable[[], None], handle: Handle) -> None:
        """Until every slot connected; ``check`` raises when the run cannot go on (cancelled,
        the Spark job ended), ``handle`` gets any other message."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        connected: set[int] = set()
        while len(connected) < self.slots:
            check()
            try:
                index, msg = self.messages.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    msg = (
                        f"only {len(connected)} of {self.slots} slots of the continuous run connected within "
                        f"{CONNECT_TIMEOUT_S:.0f} s; Spark could not schedule them all at once"
                    )
                    raise JobExecutionError(msg) from None
                continue
            if msg[0] == "connected":
                connected.add(index)
            else:
                handle(index, msg)

    def drain(self, wait: float, handle: Handle) -> None:
        """Every message waiting (the first up to ``wait`` seconds away) to ``handle``."""
        try:
            index, msg = self.messages.get(timeout=wait)
        except queue.Empty:
            return
        handle(index, msg)
        while True:
            try:
                index, msg = self.messages.get_nowait()
            except queue.Empty:
                return
            handle(index, msg)

    def reported_failure(self, wait: float) -> BaseException | None:
        """The error a slot reported (a "failed" message), waiting up to ``wait`` seconds for
        one: when the run's Spark job fails, the slot that failed it has already sent its own
        error, which names the operator and record that Spark's text does not. Other messages
        are dropped: the run is over."""
        deadline = time.monotonic() + wait
        while True:
            try:
                _, msg = self.messages.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if msg[0] == "failed":
                return slot_error(msg)

    def send(self, index: int, cmd: tuple) -> None:
        channel = self.controls.get(index)
        if channel is None:
            msg = f"slot {index} of the continuous run is not connected"
            raise JobExecutionError(msg)
        channel.send(cmd)

    def broadcast(self, cmd: tuple) -> None:
        for index in range(self.slots):
            try:
                self.send(index, cmd)
            except (ChannelError, JobExecutionError):
                if cmd[0] != "cancel":
                    raise

    def close(self) -> None:
        self.closed = True
        self.server.close()


def slot_error(msg: tuple) -> BaseException:
    """The error of a slot's ``("failed", stage, partition, error)`` message: the subtask's own
    exception, or its text when it could not travel as one."""
    error = msg[3]
    return error if isinstance(error, BaseException) else JobExecutionError(str(error))


def slot_shortage(adapter: Any, slots: int, job_name: str, wait_s: float = 0.0, check: Callable[[], None] = lambda: None) -> str | None:
    """Why the continuous runtime cannot run a job that needs ``slots`` task slots at once on
    this Spark (None when it can): fewer slots than that (on a cluster, after waiting up to
    ``wait_s`` for executors to register; ``check`` raises if the job is cancelled meanwhile),
    or a setting Spark refuses barrier stages with. ``adapter``: the session's SparkAdapter."""
    have = adapter.slots_available()
    master = adapter.master()
    if have < slots and master != "local" and not master.startswith("local["):
        deadline = time.monotonic() + wait_s
        while have < slots and time.monotonic() < deadline:
            check()
            time.sleep(0.5)
            have = adapter.slots_available()
    if have < slots:
        return (
            f"the continuous runtime runs every parallel instance at once: job {job_name!r} needs "
            f"{slots} task slots (its largest parallelism) but Spark offers {have} "
            f"(master {master or adapter.describe()})"
        )
    for key in ("spark.dynamicAllocation.enabled", "spark.speculation"):
        if str(adapter.conf_value(key) or "false").lower() == "true":
            return f"the continuous runtime runs in a Spark barrier stage, which Spark refuses with {key}=true"
    return None


def check_slots(adapter: Any, slots: int, job_name: str, wait_s: float, check: Callable[[], None] = lambda: None) -> None:
    """A barrier stage runs all its tasks at once: refuse, naming both numbers, a job that needs
    more slots than Spark offers, and the settings Spark refuses barrier stages with. On a
    cluster, executors lost with a failed run may be registering again: wait for them up to
    ``wait_s`` (``slot.request.timeout``) first (``check`` raises if the job is cancelled meanwhile)."""
    reason = slot_shortage(adapter, slots, job_name, wait_s, check)
    if reason is not None:
        msg = (f"{reason}; lower the parallelism, add cores or executors, turn that setting off, or run it with "
               "execution.runtime: epoch. Dynamic allocation and speculation do not work with Spark's barrier stages either.")
        raise ConfigurationError(msg)


def control_host(adapter: Any, config: Any) -> str:
    """The address a continuous run's tasks connect to: ``execution.continuous.control-host``,
    else the adapter's choice (127.0.0.1 for a local master, ``spark.driver.host`` on a cluster,
    on Spark Connect the address towards the server)."""
    return str(config.get("execution.continuous.control-host") or adapter.control_host())


def most_slots(adapter: Any) -> int | None:
    """The most task slots a cluster's settings can ever give this application (None: no bound
    known): ``local-cluster[N,C,M]`` has N executors of C cores; ``spark.cores.max`` caps a
    standalone application's cores; with dynamic allocation off, ``spark.executor.instances``
    executors of ``spark.executor.cores`` (both set) on YARN or Kubernetes. Each slot takes
    ``spark.task.cpus`` cores. ``adapter``: the session's SparkAdapter (classic or Connect)."""
    master = adapter.master() or ""
    try:
        cpus = max(1, int(adapter.conf_value("spark.task.cpus") or "1"))
        m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master.strip())
        if m:
            return int(m[1]) * int(m[2]) // cpus
        cores_max = adapter.conf_value("spark.cores.max")
        if cores_max is not None and master.startswith("spark://"):
            return int(cores_max) // cpus
        instances, cores = adapter.conf_value("spark.executor.instances"), adapter.conf_value("spark.executor.cores")
        dynamic = str(adapter.conf_value("spark.dynamicAllocation.enabled") or "false").lower() == "true"
        if instances is not None and cores is not None and not dynamic and master.startswith(("yarn", "k8s://")):
            return int(instances) * (int(cores) // cpus)
    except (TypeError, ValueError):
        return None
    return None
