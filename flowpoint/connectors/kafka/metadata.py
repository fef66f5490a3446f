"""The driver's view of the brokers: partitions, offsets held, committed offsets, commits.

One ``confluent_kafka.Consumer`` per source on the driver, never in a group (it assigns, never
subscribes, so no group rebalance delays it). Every call is bounded by the source's timeout
(``default.api.timeout.ms``) and an unreachable broker raises :class:`KafkaUnreachableError`.

High watermarks: a broker's ListOffsets(latest) answer is not trusted alone (Tansu answers the
base offset of the partition's last record batch plus one, see docs/kafka.md). The high watermark
a Fetch response carries is exact, so :meth:`BrokerView.watermarks` fetches from one offset
before the listed end of each non-empty partition and takes the end-of-partition offset the
fetch reports. Against Apache Kafka both agree and the fetch costs one small batch.
"""

from __future__ import annotations

import logging
import re
import time

from flowpoint.connectors.kafka.errors import KafkaUnreachableError
from flowpoint.connectors.kafka.offsets import KafkaTopicPartition

log = logging.getLogger(__name__)

# what the driver's own consumer never takes from the user's properties
_DRIVER_OVERRIDES = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
}


def _tp(tp: KafkaTopicPartition, offset: int | None = None):
    from confluent_kafka import TopicPartition

    return TopicPartition(tp.topic, tp.partition) if offset is None else TopicPartition(tp.topic, tp.partition, offset)


class BrokerView:
    def __init__(self, client_config: dict, timeout_s: float, group_id: str | None):
        self.client_config = dict(client_config)
        self.timeout_s = timeout_s
        self.group_id = group_id
        self._consumer = None

    @property
    def bootstrap(self) -> str:
        return str(self.client_config.get("bootstrap.servers"))

    def consumer(self):
        if self._consumer is None:
            from confluent_kafka import Consumer

            conf = dict(self.client_config)
            conf.setdefault("group.id", self.group_id or "flowpoint-kafka-source")
            conf.setdefault("log_level", 2)  # librdkafka's connection chatter stays off stderr
            # a fetch the broker holds open (fetch.wait.max.ms, 500 by default) delays every later
            # request on the connection: after one probe, each ListOffsets took 0.5 s on Tansu
            conf.setdefault("fetch.wait.max.ms", 10)
            conf.update(_DRIVER_OVERRIDES)
            self._consumer = Consumer(conf)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _unreachable(self, what: str, e: BaseException) -> KafkaUnreachableError:
        self.close()
        msg = (
            f"Kafka brokers {self.bootstrap} did not answer ({what}) within {self.timeout_s:g}s: {e}. "
            f"Check bootstrap.servers and that the brokers run; the timeout is the source property "
            f"default.api.timeout.ms"
        )
        return KafkaUnreachableError(msg)

    # -- partitions ----------------------------------------------------------------------------

    def partitions(self, topics: list[str] | None, pattern: str | None) -> tuple[list[KafkaTopicPartition], set[str]]:
        """The partitions of ``topics`` (or of the topics matching ``pattern``), sorted, and the
        listed topics the brokers do not know."""
        from confluent_kafka import KafkaException

        try:
            md = self.consumer().list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            msg = "metadata"
            raise self._unreachable(msg, e) from None
        if not md.brokers:
            msg = "metadata"
            raise self._unreachable(msg, RuntimeError("no brokers in the metadata"))
        out: list[KafkaTopicPartition] = []
        missing: set[str] = set()
        if pattern is not None:
            rx = re.compile(pattern)
            names = sorted(t for t in md.topics if rx.fullmatch(t) and not t.startswith("__"))
        else:
            names = list(topics or [])
        for name in names:
            t = md.topics.get(name)
            if t is None or t.error is not None or not t.partitions:
                missing.add(name)
                continue
            out.extend(KafkaTopicPartition(name, p) for p in sorted(t.partitions))
        return sorted(out), missing

    # -- offsets -------------------------------------------------------------------------------

    def watermarks(self, tps: list[KafkaTopicPartition]) -> dict[KafkaTopicPartition, tuple[int, int]]:
        """``{partition: (log start offset, high watermark)}``; a partition the brokers do not
        know (deleted topic) is left out."""
        from confluent_kafka import KafkaError, KafkaException

        c = self.consumer()
        out: dict[KafkaTopicPartition, list[int]] = {}
        probe = []
        for tp in tps:
            try:
                low, high = c.get_watermark_offsets(_tp(tp), timeout=self.timeout_s, cached=False)
            except KafkaException as e:
                code = e.args[0].code() if e.args else None
                if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                    continue
                msg = f"offsets of {tp}"
                raise self._unreachable(msg, e) from None
            out[tp] = [low, high]
            if high > low:
                probe.append(_tp(tp, high - 1))
        if probe:
            pending = {(p.topic, p.partition) for p in probe}
            c.assign(probe)
            deadline = time.monotonic() + min(self.timeout_s, 5.0)
            try:
                while pending and time.monotonic() < deadline:
                    for m in c.consume(1000, 0.01):
                        key = (m.topic(), m.partition())
                        tp = KafkaTopicPartition(*key)
                        err = m.error()
                        if err is None:
                            out[tp][1] = max(out[tp][1], m.offset() + 1)
                        elif err.code() == KafkaError._PARTITION_EOF:
                            out[tp][1] = max(out[tp][1], m.offset())
                            pending.discard(key)
            finally:
                c.unassign()
            if pending:
                log.debug("Kafka: no fetch answer for %s in time; their listed high watermarks are used", sorted(pending))
        return {tp: (lo, hi) for tp, (lo, hi) in out.items()}

    def committed(self, tps: list[KafkaTopicPartition]) -> dict[KafkaTopicPartition, int | None]:
        from confluent_kafka import KafkaException

        if not tps:
            return {}
        try:
            got = self.consumer().committed([_tp(tp) for tp in tps], timeout=self.timeout_s)
        except KafkaException as e:
            msg = f"committed offsets of group {self.group_id!r}"
            raise self._unreachable(msg, e) from None
        return {KafkaTopicPartition(t.topic, t.partition): (t.offset if t.offset >= 0 else None) for t in got}

    def first_offset_at(self, tp: KafkaTopicPartition, timestamp_ms: int, low: int, high: int) -> int:
        """The first offset in ``[low, high)`` whose record timestamp is ``>= timestamp_ms``, else
        ``high``. Found by reading the partition from ``low`` (the broker's offsets_for_times is
        not trusted: Tansu ignores the timestamp, see docs/kafka.md)."""
        from confluent_kafka import KafkaError

        if high <= low:
            return high
        c = self.consumer()
        c.assign([_tp(tp, low)])
        deadline = time.monotonic() + self.timeout_s
        try:
            while time.monotonic() < deadline:
                for m in c.consume(10000, 0.2):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF and m.offset() >= high:
                            return high
                        continue
                    if m.offset() >= high:
                        return high
                    if m.timestamp()[1] >= timestamp_ms:
                        return m.offset()
        finally:
            c.unassign()
        msg = f"records of {tp} looking for timestamp {timestamp_ms}"
        raise self._unreachable(msg, TimeoutError("read timed out"))

    def commit(self, offsets: dict[KafkaTopicPartition, int]) -> None:
        if offsets:
            self.consumer().commit(offsets=[_tp(tp, off) for tp, off in sorted(offsets.items())], asynchronous=False)
