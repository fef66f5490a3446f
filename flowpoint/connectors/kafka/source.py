"""``KafkaSource``: PyFlink's Kafka source on flowpoint's replayable Source contract.

Splits are topic-partitions (split id ``topic-partition``, payload ``{"topic", "partition",
"stop"}``); a split's position is its next offset, an int, so checkpoint ``_metadata`` holds
plain data. Each epoch the driver plans ``[position, end)`` per partition from the broker's
offsets (:mod:`.metadata`, :func:`.offsets.plan_range`), at most ``execution.epoch.max-records``
over all partitions; a task reads exactly that range (:mod:`.reader`), so a retry reads the same
records. Positions are restored from checkpoints and savepoints only; offsets committed to the
consumer group on checkpoint completion are for monitoring (and ``committed_offsets()``).

Source properties flowpoint reads itself (never passed to the Kafka client):
``partition.discovery.interval.ms`` (new partitions and topics of the subscription; default
300000 for an unbounded source, off for a bounded one, <= 0 off), ``default.api.timeout.ms``
(every broker request of the driver and each range read, default 60000),
``commit.offsets.on.checkpoint`` (default true), ``deserialization.skip-errors`` (default
false) and ``auto.offset.reset`` (earliest, latest, none: where an out-of-range position goes;
default earliest). All other properties go to ``confluent_kafka.Consumer``.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from flowpoint.connectors.kafka.deserialization import DeserializationSchema
from flowpoint.connectors.kafka.errors import KafkaConfigurationError, KafkaUnreachableError
from flowpoint.connectors.kafka.metadata import BrokerView
from flowpoint.connectors.kafka.offsets import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
    RangePlan,
    plan_range,
    reset_offset,
)
from flowpoint.connectors.kafka.reader import KafkaSourceReader
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan

log = logging.getLogger(__name__)

_FLOWPOINT_PROPERTIES = {
    "partition.discovery.interval.ms": None,
    "default.api.timeout.ms": "60000",
    "commit.offsets.on.checkpoint": "true",
    "deserialization.skip-errors": "false",
    "auto.offset.reset": "earliest",
}
# Flink/Kafka Java properties that mean nothing to librdkafka: dropped with a note
_JAVA_ONLY = {"client.id.prefix", "register.consumer.metrics", "key.deserializer", "value.deserializer"}


def _bool(value: Any, key: str) -> bool:
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    msg = f"KafkaSource property {key} must be true or false; got {value!r}"
    raise KafkaConfigurationError(msg)


def _int(value: Any, key: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        msg = f"KafkaSource property {key} must be an integer (milliseconds); got {value!r}"
        raise KafkaConfigurationError(msg) from None


def split_id(tp: KafkaTopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _partition_of(split: SourceSplit) -> KafkaTopicPartition:
    return KafkaTopicPartition(split.payload["topic"], int(split.payload["partition"]))


class KafkaSource(Source):
    """Build with :meth:`builder`; read with ``env.from_source(source, strategy, "kafka")``."""

    def __init__(self, bootstrap_servers: str, topics: list[str] | None, topic_pattern: str | None,
                 group_id: str | None, starting: KafkaOffsetsInitializer, stopping: KafkaOffsetsInitializer | None,
                 deserializer: DeserializationSchema, properties: dict[str, str]):
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.group_id = group_id
        self.starting = starting
        self.stopping = stopping
        self.deserializer = deserializer
        self.properties = dict(properties)
        props = {k: v for k, v in properties.items() if k in _FLOWPOINT_PROPERTIES}
        self.timeout_s = _int(props.get("default.api.timeout.ms", _FLOWPOINT_PROPERTIES["default.api.timeout.ms"]), "default.api.timeout.ms") / 1000.0
        self.commit_on_checkpoint = _bool(props.get("commit.offsets.on.checkpoint", "true"), "commit.offsets.on.checkpoint")
        self.skip_errors = _bool(props.get("deserialization.skip-errors", "false"), "deserialization.skip-errors")
        self.reset = KafkaOffsetResetStrategy.of(props.get("auto.offset.reset", "earliest"))
        interval = props.get("partition.discovery.interval.ms")
        if interval is None:
            self.discovery_interval_s = None if stopping is not None else 300.0
        else:
            ms = _int(interval, "partition.discovery.interval.ms")
            self.discovery_interval_s = ms / 1000.0 if ms > 0 else None
        client = {k: v for k, v in properties.items() if k not in _FLOWPOINT_PROPERTIES and k not in _JAVA_ONLY}
        client["bootstrap.servers"] = bootstrap_servers
        if group_id:
            client["group.id"] = group_id
        self.client_config = client
        self.output_type = deserializer.get_produced_type()
        self._view: BrokerView | None = None
        self._watermarks: dict[KafkaTopicPartition, tuple[int, int]] = {}
        self._watermarks_at = 0.0
        self._starts: dict[str, int] = {}  # a reset's new start, from plan() to read_spec()
        self._last_discovery = 0.0
        self._warned: set[str] = set()
        self._known: set[KafkaTopicPartition] = set()  # partitions whose offsets each plan refreshes

    @staticmethod
    def builder() -> KafkaSourceBuilder:
        return KafkaSourceBuilder()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_view"] = None  # the driver's consumer stays on the driver
        return state

    def default_name(self) -> str:
        return "KafkaSource"

    def is_bounded(self) -> bool:
        return self.stopping is not None

    def view(self) -> BrokerView:
        if self._view is None:
            self._view = BrokerView(self.client_config, self.timeout_s, self.group_id)
        return self._view

    def create_reader(self) -> SourceReader:
        return KafkaSourceReader(self.client_config, self.deserializer, self.skip_errors, self.timeout_s)

    def supports_open_reads(self) -> bool:
        return True

    # -- splits --------------------------------------------------------------------------------

    def _partitions(self) -> list[KafkaTopicPartition]:
        tps, missing = self.view().partitions(self.topics, self.topic_pattern)
        for name in sorted(missing):
            if name not in self._warned:
                self._warned.add(name)
                later = "it is read when it appears" if self.discovery_interval_s else "set partition.discovery.interval.ms to read it when it appears"
                log.warning("KafkaSource: topic %r does not exist on %s; %s", name, self.bootstrap_servers, later)
        return tps

    def _splits(self, tps: list[KafkaTopicPartition], starting: KafkaOffsetsInitializer) -> list[SourceSplit]:
        if not tps:
            return []
        self._known.update(tps)
        marks = self.view().watermarks(tps)
        starts = self._resolve(starting, tps, marks, "starting")
        stops = self._resolve(self.stopping, tps, marks, "stopping") if self.stopping is not None else {}
        return [
            SourceSplit(split_id(tp), {"topic": tp.topic, "partition": tp.partition, "stop": stops.get(tp)}, starts[tp])
            for tp in tps
        ]

    def _resolve(self, init: KafkaOffsetsInitializer, tps: list[KafkaTopicPartition],
                 marks: dict[KafkaTopicPartition, tuple[int, int]], role: str) -> dict[KafkaTopicPartition, int]:
        out: dict[KafkaTopicPartition, int] = {}
        committed = self.view().committed(tps) if init.kind == "committed" else {}
        if init.kind == "committed" and not self.group_id:
            msg = "KafkaOffsetsInitializer.committed_offsets() needs a consumer group: call set_group_id(...)"
            raise KafkaConfigurationError(msg)
        for tp in tps:
            low, high = marks.get(tp, (0, 0))
            if init.kind == "earliest":
                out[tp] = low
            elif init.kind == "latest":
                out[tp] = high
            elif init.kind == "timestamp":
                out[tp] = self.view().first_offset_at(tp, init.timestamp_ms, low, high)
            elif init.kind == "committed":
                off = committed.get(tp)
                out[tp] = off if off is not None else reset_offset(
                    init.reset, low, high, str(tp), f"group {self.group_id!r} has no committed offset ({role} offsets)")
            elif init.kind == "offsets":
                off = init.offsets.get(tp)
                out[tp] = off if off is not None else reset_offset(
                    init.reset, low, high, str(tp), f"no offset given for it ({role} offsets)")
            else:
                msg = f"unknown offsets initializer {init!r}"
                raise KafkaConfigurationError(msg)
        return out

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        self._last_discovery = time.monotonic()
        self._starts = {}
        return self._splits(self._partitions(), self.starting)

    def discover_splits(self, known: list[SourceSplit]) -> list[SourceSplit]:
        if self.discovery_interval_s is None or time.monotonic() - self._last_discovery < self.discovery_interval_s:
            return []
        self._last_discovery = time.monotonic()
        have = {s.split_id for s in known}
        new = [tp for tp in self._partitions() if split_id(tp) not in have]
        if new:
            log.info("KafkaSource: discovered %s; read from their earliest offsets", ", ".join(map(str, new)))
        # partitions that appear while the job runs are read from their start, as Flink does
        return self._splits(new, KafkaOffsetsInitializer.earliest())

    # -- planning ------------------------------------------------------------------------------

    def _marks(self, tp: KafkaTopicPartition) -> tuple[int, int] | None:
        # one round of broker requests per plan of every split (an epoch, or a continuous round)
        stale = time.monotonic() - self._watermarks_at > 0.005  # the continuous loop plans every few ms
        if stale or tp not in self._known:
            self._known.add(tp)
            self._watermarks = self.view().watermarks(sorted(self._known))
            self._watermarks_at = time.monotonic()
        return self._watermarks.get(tp)

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        tp = _partition_of(split)
        stop = split.payload.get("stop")
        self._starts.pop(split.split_id, None)
        if stop is not None and position >= stop:
            return SplitPlan(position, 0, True)
        marks = self._marks(tp)
        if marks is None:
            if split.split_id not in self._warned:
                self._warned.add(split.split_id)
                log.warning("KafkaSource: partition %s is gone from %s (topic deleted?); nothing is read from it until it "
                            "comes back, then auto.offset.reset=%s applies", tp, self.bootstrap_servers, self.reset.value)
            return SplitPlan(position, 0, stop is not None)
        self._warned.discard(split.split_id)
        low, high = marks
        r: RangePlan = plan_range(str(tp), position, low, high, stop, budget, self.reset)
        if r.reset is not None:
            log.warning("KafkaSource: partition %s: %s; auto.offset.reset=%s moves it to offset %d",
                        tp, r.reset, self.reset.value, r.start)
            self._starts[split.split_id] = r.start
            # the skipped offsets count as planned: the position moves even without records
            return SplitPlan(r.end, max(1, r.records), r.finished)
        return SplitPlan(r.end, r.records, r.finished)

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        start = self._starts.pop(split.split_id, start)
        return (split.payload["topic"], int(split.payload["partition"]), int(start), int(end))

    # -- checkpoints ---------------------------------------------------------------------------

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[tuple[SourceSplit, Any]]) -> None:
        if not (self.commit_on_checkpoint and self.group_id):
            return
        offsets = {_partition_of(split): int(pos) for split, pos in positions}
        try:
            self.view().commit(offsets)
        except Exception as e:  # noqa: BLE001 - monitoring only: the checkpoint holds the positions
            log.warning("KafkaSource: committing the offsets of checkpoint %d to group %r failed (%s); "
                        "recovery does not use them", checkpoint_id, self.group_id, e)

    def __del__(self):
        view = self.__dict__.get("_view")
        if view is not None:
            try:
                view.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


class KafkaSourceBuilder:
    """``KafkaSource.builder()...build()`` with PyFlink's method names."""

    def __init__(self) -> None:
        self._bootstrap: str | None = None
        self._topics: list[str] | None = None
        self._pattern: str | None = None
        self._group_id: str | None = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: KafkaOffsetsInitializer | None = None
        self._deserializer: DeserializationSchema | None = None
        self._properties: dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSourceBuilder:
        self._bootstrap = bootstrap_servers
        return self

    def set_topics(self, *topics: str | list[str]) -> KafkaSourceBuilder:
        names: list[str] = []
        for t in topics:
            names.extend([t] if isinstance(t, str) else list(t))
        self._topics, self._pattern = names, None
        return self

    def set_topic_pattern(self, topic_pattern: str) -> KafkaSourceBuilder:
        try:
            re.compile(topic_pattern)
        except re.error as e:
            msg = f"set_topic_pattern({topic_pattern!r}): not a regular expression ({e})"
            raise KafkaConfigurationError(msg) from None
        self._pattern, self._topics = topic_pattern, None
        return self

    def set_partitions(self, partitions: set[KafkaTopicPartition]) -> KafkaSourceBuilder:
        msg = "set_partitions is not supported by flowpoint's KafkaSource: use set_topics or set_topic_pattern"
        raise KafkaConfigurationError(msg)

    def set_group_id(self, group_id: str) -> KafkaSourceBuilder:
        self._group_id = group_id
        return self

    def set_client_id_prefix(self, prefix: str) -> KafkaSourceBuilder:
        self._properties["client.id"] = prefix
        return self

    def set_starting_offsets(self, initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        self._starting = _initializer(initializer, "set_starting_offsets")
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        init = _initializer(stopping_offsets_initializer, "set_bounded")
        if init.kind == "committed":
            msg = "set_bounded(committed_offsets()) is not supported: use latest(), offsets({...}) or timestamp(ms)"
            raise KafkaConfigurationError(msg)
        self._stopping = init
        return self

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        msg = "set_unbounded is not supported by flowpoint's KafkaSource: use set_bounded(...) for a bounded read"
        raise KafkaConfigurationError(msg)

    def set_value_only_deserializer(self, deserialization_schema: DeserializationSchema) -> KafkaSourceBuilder:
        if not hasattr(deserialization_schema, "deserialize"):
            msg = f"set_value_only_deserializer needs a DeserializationSchema (SimpleStringSchema(), ...); got {deserialization_schema!r}"
            raise KafkaConfigurationError(msg)
        self._deserializer = deserialization_schema
        return self

    def set_property(self, key: str, value: str) -> KafkaSourceBuilder:
        self._properties[str(key)] = str(value)
        return self

    def set_properties(self, props: dict[str, str]) -> KafkaSourceBuilder:
        for k, v in dict(props).items():
            self.set_property(k, v)
        return self

    def build(self) -> KafkaSource:
        if not self._bootstrap:
            msg = "KafkaSource.builder() needs set_bootstrap_servers('host:port,...') before build()"
            raise KafkaConfigurationError(msg)
        if not self._topics and self._pattern is None:
            msg = "KafkaSource.builder() needs set_topics(...) or set_topic_pattern(...) before build()"
            raise KafkaConfigurationError(msg)
        if self._deserializer is None:
            msg = "KafkaSource.builder() needs set_value_only_deserializer(SimpleStringSchema()) (or another schema) before build()"
            raise KafkaConfigurationError(msg)
        try:
            import confluent_kafka  # noqa: F401
        except ModuleNotFoundError as e:
            msg = "KafkaSource needs the package confluent-kafka: pip install 'flowpoint[kafka]'"
            raise KafkaConfigurationError(msg) from e
        for key in self._properties:
            if key in _JAVA_ONLY:
                log.info("KafkaSource: property %s is a Java client setting; flowpoint's client ignores it", key)
        source = KafkaSource(self._bootstrap, self._topics, self._pattern, self._group_id, self._starting,
                             self._stopping, self._deserializer, self._properties)
        _check_client_config(source.client_config)
        return source


def _check_client_config(config: dict) -> None:
    """A consumer built from ``config`` (no connection is made): a property librdkafka does not
    know or a bad value fails here, at build(), naming it."""
    from confluent_kafka import Consumer, KafkaException

    conf = dict(config)
    conf.setdefault("group.id", "flowpoint-kafka-source")
    try:
        Consumer(conf).close()
    except KafkaException as e:
        msg = (
            f"KafkaSource: the Kafka client refused its properties: {e.args[0].str() if e.args else e}. Properties other than "
            f"{', '.join(sorted(_FLOWPOINT_PROPERTIES))} go to confluent_kafka (librdkafka's names: "
            f"https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md)"
        )
        raise KafkaConfigurationError(msg) from None


def _initializer(init: Any, where: str) -> KafkaOffsetsInitializer:
    if not isinstance(init, KafkaOffsetsInitializer):
        msg = f"{where} needs a KafkaOffsetsInitializer (earliest(), latest(), ...); got {init!r}"
        raise KafkaConfigurationError(msg)
    return init


__all__ = ["KafkaSource", "KafkaSourceBuilder", "KafkaUnreachableError"]
