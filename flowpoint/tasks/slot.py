"""A slot of a continuous job: one Spark barrier task hosting partition ``i`` of every stage
whose parallelism exceeds ``i`` (Flink's slot sharing, docs/architecture.md, section 4b).

The slot listens for its input channels on its executor's own address, connects its control
channel to the driver and sends it that address, learns its peers' addresses from the driver
once every slot has connected (``("peers", [...])``), connects one channel per (edge, upstream
partition, downstream partition) to each peer (partitions in the same slot hand frames over in
memory), and runs its subtasks until the driver says finish, a subtask fails (its error goes to the driver, which ends the run; an error that
could not reach it fails the slot, and with it the Spark stage and the run), or the driver goes
away.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from flowpoint.partition.protocol import ContinuousSpec, TaskSlice
from flowpoint.tasks.channels import Channel, ChannelError, ChannelServer, connect
from flowpoint.tasks.credits import CreditedChannel, LocalOutput
from flowpoint.tasks.input_gate import GateClosed, InputGate
from flowpoint.tasks.plan import StagePlan
from flowpoint.tasks.subtask import Subtask, SubtaskFailed

log = logging.getLogger("flowpoint")

METRICS_INTERVAL_S = 1.0
DRIVER_ENDS_RUN_S = 60.0  # a slot whose failure reached the driver waits this long for the run's end


class Slot:
    def __init__(self, index: int, host: str, spec: ContinuousSpec, plans: dict[int, StagePlan], slices: dict[tuple[int, int], TaskSlice]) -> None:
        self.index = index
        self.host = host
        self.spec = spec
        self.plans = plans
        self.subtasks: dict[tuple[int, int], Subtask] = {}
        self.gates: dict[int, InputGate] = {}  # stage id -> this slot's partition's gate
        self.edge_stage: dict[int, int] = {}  # edge id -> receiving stage id
        self.out: dict[tuple[int, int], Any] = {}  # (edge id, destination) -> channel or local gate
        self.control: Channel | None = None
        self.failed = threading.Event()
        self.finished = threading.Event()
        self.reported = threading.Event()  # a subtask's failure reached the driver
        self._commands_thread: threading.Thread | None = None
        # unaligned checkpoints (tasks/credits.py): each output's credits, and the channel that
        # takes a receiving gate's credits back to its sender
        self.outputs: dict[tuple[int, int], Any] = {}
        self.credit_back: dict[tuple[int, Any], Channel] = {}
        for sid, plan in plans.items():
            for e in plan.input_edges:
                self.edge_stage[e.edge_id] = sid
            if index >= plan.parallelism:
                continue
            gate = None
            if plan.source_reader is None:
                channels = [(e.edge_id, j) for e in plan.input_edges for j in range(e.upstream_parallelism)]
                gate = self.gates[sid] = InputGate(channels, spec.buffers_per_channel)
                if spec.unaligned:
                    gate.on_taken = functools.partial(self._credit, sid)
            output = self._output if spec.unaligned else None
            self.subtasks[(sid, index)] = Subtask(plan, slices[(sid, index)], spec, self._send, self._report, gate, output)
        self.server = ChannelServer(host, spec.secret, self._accept, name=f"flowpoint-slot-{index}")

    # -- wiring --------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.server.address[0]}:{self.server.address[1]}"

    def connect(self) -> bool:
        """The control channel to the driver (which learns this slot's address on it and
        answers with every slot's), then outgoing channels to every consumer partition of this
        slot's subtasks. False when the driver ended the run before it began (``cancel``)."""
        self.control = connect(self.spec.driver, self.spec.secret, ("control", self.index))
        self.control.send(("address", self.address))
        # the driver's answer, not Spark's allGather: that one polls every second, a second
        # added to the start of every run (and restart)
        cmd = self.control.recv()
        if cmd[0] == "cancel":
            return False
        if cmd[0] != "peers":
            msg = f"slot {self.index} expected its peers' addresses from the driver, got {cmd[0]!r}"
            raise SubtaskFailed(msg)
        peers = cmd[1]
        for (sid, p), _ in self.subtasks.items():
            for op in self.plans[sid].ops.values():
                for e in op.out_edges:
                    for dest in range(e.parallelism):
                        if (e.edge_id, dest) in self.out:
                            continue
                        if dest == self.index:
                            self.out[(e.edge_id, dest)] = self.gates[self.edge_stage[e.edge_id]]
                        else:
                            host, port = peers[dest].rsplit(":", 1)
                            self.out[(e.edge_id, dest)] = connect((host, int(port)), self.spec.secret, ("data", e.edge_id, p, dest))
        return True

    def _accept(self, hello: tuple, channel: Channel) -> None:
        """A peer's channel: its frames go to the receiving subtask's gate until it closes."""
        if hello[0] != "data" or len(hello) != 4 or hello[3] != self.index or hello[1] not in self.edge_stage:
            log.warning("flowpoint slot %d: a channel announced %r, which this slot does not receive; closed", self.index, hello)
            channel.close()
            return
        gate = self.gates.get(self.edge_stage[hello[1]])
        key = (hello[1], hello[2])
        if gate is None or key not in gate.queues:
            channel.close()
            return
        try:
            if not self.spec.unaligned:
                while True:
                    gate.put(key, channel.recv())
            sid = self.edge_stage[hello[1]]
            self.credit_back[(sid, key)] = channel
            while True:
                frame = channel.recv()
                if frame[0] == "barrier" and frame[1].unaligned:
                    gate.priority(key, frame[1])
                else:
                    gate.put_credited(key, frame)
        except (ChannelError, GateClosed):
            channel.close()

    def _credit(self, sid: int, key: Any) -> None:
        """The subtask of stage ``sid`` took a frame of channel ``key``: a credit back to its sender."""
        channel = self.credit_back.get((sid, key))
        if channel is not None:
            try:
                channel.send(("credit", 1))
            except ChannelError:
                pass  # the sender is gone: its failure ends the run

    def _output(self, edge_id: int, dest: int) -> Any:
        """The credit-holding output to a consumer (unaligned checkpoints)."""
        out = self.outputs.get((edge_id, dest))
        if out is None:
            target = self.out[(edge_id, dest)]
            if isinstance(target, InputGate):
                out = LocalOutput(target, (edge_id, self.index))
            else:
                out = CreditedChannel(target, self.spec.buffers_per_channel)
            self.outputs[(edge_id, dest)] = out
        return out

    def _send(self, edge_id: int, dest: int, frame: Any) -> int:
        """Send a frame to a consumer; returns the ns the sender was blocked (backpressure)."""
        target = self.out[(edge_id, dest)]
        if isinstance(target, InputGate):
            try:
                return target.put((edge_id, self.index), frame)
            except GateClosed:
                return 0  # the consumer ended (its failure fails the slot)
        return target.send(frame)

    def _report(self, message: tuple) -> None:
        failing = message[0] == "failed"
        try:
            if self.control is not None:
                self.control.send(message)
                if failing:
                    self.reported.set()
        except ChannelError:
            self.failed.set()
        finally:
            # only once the error is on its way: the run loop, seeing `failed` before `reported`,
            # would fail the Spark task itself and close the control channel under the send; the
            # driver then saw the channel lost instead of the error, after Spark printed the
            # task's traceback with Java's (issue 25: a state whose kind changed)
            if failing:
                self.failed.set()

    # -- running -------------------------------------------------------------------------------

    def run(self) -> None:
        for st in self.subtasks.values():
            st.start()
        self._commands_thread = threading.Thread(target=self._commands, name=f"flowpoint-slot-{self.index}-control", daemon=True)
        self._commands_thread.start()
        next_metrics = time.monotonic() + METRICS_INTERVAL_S
        try:
            while True:
                if self.failed.is_set():
                    errors = [st.error for st in self.subtasks.values() if st.error is not None]
                    if errors and self._driver_ends_the_run():
                        return
                    if errors:
                        raise errors[0]
                    msg = f"slot {self.index} lost its control channel to the driver"
                    raise SubtaskFailed(msg)
                if all(st.done for st in self.subtasks.values()):
                    return
                time.sleep(0.01)
                if time.monotonic() >= next_metrics:
                    next_metrics = time.monotonic() + METRICS_INTERVAL_S
                    self._report(("metrics", self.index, self.metrics()))
        finally:
            self.close()

    def _driver_ends_the_run(self) -> bool:
        """The driver has the subtask's error (it raises it and ends the run: it closes the
        control channel, then cancels the Spark job): wait for that and end quietly, so the
        error is not printed again by Spark (a user function's traceback with Java's). False
        when the error did not reach the driver, or the driver did not end the run in time:
        the slot then fails the Spark task with the error."""
        thread = self._commands_thread
        if not self.reported.is_set() or thread is None:
            return False
        thread.join(DRIVER_ENDS_RUN_S)
        return not thread.is_alive()

    def _commands(self) -> None:
        """The driver's commands, routed to the subtasks."""
        try:
            while True:
                cmd = self.control.recv()
                kind = cmd[0]
                if kind == "read":
                    self.subtasks[(cmd[1], cmd[2])].commands.put(("read", cmd[3], cmd[4]))
                elif kind == "open":
                    self.subtasks[(cmd[1], cmd[2])].commands.put(("open", cmd[3]))
                elif kind == "barrier":
                    for st in self.subtasks.values():
                        if st.plan.source_reader is not None:
                            st.commands.put(cmd)
                elif kind == "end":
                    self.subtasks[(cmd[1], cmd[2])].commands.put(("end",))
                else:  # notify, finish, cancel: every subtask
                    for st in self.subtasks.values():
                        if st.gate is not None:
                            st.gate.command(cmd)
                        else:
                            st.commands.put(cmd)
                    if kind in ("finish", "cancel"):
                        return
        except ChannelError:
            if not all(st.done for st in self.subtasks.values()):
                self.failed.set()  # the driver went away: the run is over

    def metrics(self) -> list:
        """Each subtask's MetricReport since the last one (flowpoint/metrics/report.py)."""
        reports = []
        for st in self.subtasks.values():
            if not st.done:
                report = st.metric_report()
                if report is not None:
                    reports.append(report)
        return reports

    def close(self) -> None:
        for gate in self.gates.values():
            gate.close()
        for st in self.subtasks.values():
            if st.gate is None:
                st.commands.put(("cancel",))
        self.server.close()
        for target in self.out.values():
            if isinstance(target, Channel):
                target.close()
        if self.control is not None:
            self.control.close()


def run_slot(index: int, host: str, spec: ContinuousSpec, plans: dict[int, StagePlan], slices: dict[tuple[int, int], TaskSlice]) -> None:
    slot = Slot(index, host, spec, plans, slices)
    try:
        began = slot.connect()
    except BaseException:
        slot.close()
        raise
    if not began:
        slot.close()
        return
    slot.run()
