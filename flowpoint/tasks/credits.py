"""Credit-based flow control for unaligned checkpoints (docs/architecture.md, section 4b).

With aligned checkpoints a sender writes to its channel until the receiver's queue and the
sockets are full, and a barrier waits its turn behind everything written. An unaligned barrier
must overtake, so, as in Flink's credit-based network stack, a sender only writes a frame the
receiver has room for: each receiver queue of ``capacity`` frames grants ``capacity`` credits,
a frame costs one, and the receiver hands one back (``("credit", 1)`` on the same connection)
each time its subtask takes a frame off the queue. Nothing but credited frames ever waits in a
socket, so the receiver reads a barrier as soon as it is sent; the sender sends barriers without
credit, ahead of the frames it still holds (``send_priority``).

A sender's outputs are :class:`CreditedChannel` (a peer slot, over TCP) or :class:`LocalOutput`
(a subtask of the same slot: its gate's free room are the credits).
"""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.channels import Channel, ChannelError
from flowpoint.tasks.input_gate import GateClosed, InputGate


class CreditedChannel:
    def __init__(self, channel: Channel, capacity: int) -> None:
        self.channel = channel
        self.credits = max(1, capacity)

    def _collect(self, timeout: float) -> None:
        """Take the credits the receiver sent back (waiting up to ``timeout`` s for the first)."""
        while self.channel.poll(timeout):
            msg = self.channel.recv()
            if not isinstance(msg, tuple) or len(msg) != 2 or msg[0] != "credit" or type(msg[1]) is not int or msg[1] < 1:
                msg_ = f"{self.channel.peer} sent {msg!r:.80} on a data channel, not a credit"
                raise ChannelError(msg_)
            self.credits += msg[1]
            timeout = 0.0

    def try_send(self, frame: Any) -> bool:
        if self.credits <= 0:
            self._collect(0.0)
            if self.credits <= 0:
                return False
        self.channel.send(frame)
        self.credits -= 1
        return True

    def send_priority(self, frame: Any) -> None:
        self.channel.send(frame)

    def wait(self, timeout: float) -> None:
        self._collect(timeout)


class LocalOutput:
    def __init__(self, gate: InputGate, key: Any) -> None:
        self.gate = gate
        self.key = key

    def try_send(self, frame: Any) -> bool:
        try:
            return self.gate.put_nowait(self.key, frame)
        except GateClosed:
            return True  # the consumer ended (its failure fails the slot)

    def send_priority(self, frame: Any) -> None:
        try:
            self.gate.priority(self.key, frame[1])
        except GateClosed:
            pass

    def wait(self, timeout: float) -> None:
        self.gate.wait_room(self.key, timeout)
