"""How a continuous source subtask reads (docs/architecture.md, section 4b): the assignments the driver sends (planned
read specs, in order, with the barriers between them) and the splits it keeps open (Kafka),
polled between two looks at its commands. A mixin of :class:`~flowpoint.tasks.subtask.Subtask`:
it uses the subtask's chain (``rt``), its ``commands`` queue, ``report`` and its output and
barrier methods.
"""

from __future__ import annotations

import queue
import time
from typing import Any

from flowpoint.tasks.stage_task import deliver_source_item

OPEN_POLL_S = 0.002  # how long a source task with open splits waits for records before it looks at its commands


class SourceReading:
    rt: Any
    plan: Any

    def _source_loop(self) -> None:
        head = self.rt.ops[self.plan.head]
        reader = self.plan.source_reader
        while True:
            if self.deferred_done or (self.credited and self.frames.unsent()):
                self.frames.drain()  # output that waited while a barrier went ahead: send it first
            t0 = time.perf_counter_ns()
            try:
                cmd = self.commands.get_nowait() if self.open_reads else self.commands.get(timeout=self._wait())
            except queue.Empty:
                cmd = None
            if not self.open_reads:
                # waiting for the driver's next assignment is idle time, whether one came or not:
                # a rate-limited source (its next records not yet due) or one with nothing new
                # waits here, as Flink's source with nothing to read counts as idle
                self.idle_ns += time.perf_counter_ns() - t0
            elif cmd is None:
                t1 = time.perf_counter_ns()
                if not self._poll_open(head, min(self._wait(), OPEN_POLL_S)):
                    self.idle_ns += time.perf_counter_ns() - t1  # nothing new in the open splits
            self._tick()
            if cmd is None:
                continue
            kind = cmd[0]
            if kind == "open":
                for split_index, split, position in cmd[1]:
                    self.open_reads[split_index] = (reader.open(split, position), split)
                    self.positions[split_index] = (position, False)
            elif kind == "read":
                for split_index, split, read_spec, finished in cmd[1]:
                    self._read(head, reader, split_index, split, read_spec, finished)
                self._after_input()
                done = ("read-done", self.plan.stage_id, self.partition, cmd[2])
                if self.credited and self.frames.unsent():
                    # unaligned: the read was processed to reach a barrier while its output
                    # waits for credits; the driver assigns the next read once it is sent, so
                    # that barriers, not reads, go past backpressure
                    self.deferred_done.append(done)
                else:
                    self.report(done)
            elif kind == "barrier":
                self._on_barrier(cmd[1])
            elif self._command(cmd):
                return

    def _read(self, head: Any, reader: Any, split_index: int, split: Any, read_spec: Any, finished: bool) -> None:
        if read_spec is not None:
            self._emit(head, split_index, reader.read(split, read_spec))
        self._split_end(split_index, finished)

    def _emit(self, head: Any, split_index: int, items: Any) -> None:
        seq = self.split_seq.get(split_index, 0)
        for data in items:
            seq += 1
            self.records_in += deliver_source_item(self.plan, head, (self.plan.head, split_index, seq), data)
            self._after_input()
        self.split_seq[split_index] = seq

    def _poll_open(self, head: Any, timeout: float) -> bool:
        """The open splits' new records (each polled for a share of ``timeout``); whether there
        were any."""
        share = timeout / max(1, len(self.open_reads))
        got = False
        for split_index, (read, _split) in list(self.open_reads.items()):
            items, position, finished = read.poll(self.spec.max_frame_items * 64, share)
            self.positions[split_index] = (position, finished)
            if items:
                got = True
                self._emit(head, split_index, items)
                self._split_end(split_index, finished)
            elif finished:
                self._split_end(split_index, True)
            if finished:
                read.close()
                del self.open_reads[split_index]
                self._after_input()
                self.report(("split-finished", self.plan.stage_id, self.partition, split_index, position))
        return got

    def _close_open_reads(self) -> None:
        reads, self.open_reads = self.open_reads, {}
        for read, _split in reads.values():
            try:
                read.close()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def _split_end(self, split_index: int, finished: bool) -> None:
        self.rt.end_split_read((self.plan.head, split_index, self.split_seq.get(split_index, 0)), finished)
