"""Configuration keys flowpoint reads, with their defaults (Flink-style dotted names).

Typed keys are checked when they are set (``Configuration.set``, ``-D``, ``flowpoint.yaml``):
durations take Flink's forms (``"60 s"``, ``"1 min"``, ``"500 ms"``, a bare number is
milliseconds) and are kept as milliseconds; booleans are ``true``/``false``; enumerations are
case-insensitive. Where Flink 2 renamed a key, both names work and are kept under one
(``ALIASES``), so a later layer overrides an earlier one whichever name each used.

Two families of keys pass through: ``spark.*`` reach the SparkSession flowpoint creates
(``spark.executor.memory``, ``spark.submit.pyFiles``, ...), and filesystem options
(``s3.*``, ``hdfs.*``, ``gs.*``, ``fs.*``; see ``flowpoint.api.storage_options``) reach checkpoint
and state storage on the driver and every executor. The known ``s3.*`` keys are checked here.

Key names are checked too (:func:`check_key`): a key close to a known one (``state.backend.typ``)
is a typo, warned about with the known key's name; where ``config.strict`` is on, it is a
:class:`~flowpoint.errors.ConfigurationError`, and so is every other unknown key outside the
pass-through families. ``config.strict`` defaults to on for ``flowpoint run -D`` and off for a
``Configuration``/dict and ``flowpoint.yaml``; a pass-through key is only flagged when it is close
to a known key of its own family (``s3.endpont``, ``spark.mastr``).
"""

from __future__ import annotations

import datetime
import difflib
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from flowpoint.api import cli_context
from flowpoint.api.time import Duration
from flowpoint.errors import ConfigurationError

log = logging.getLogger("flowpoint")

# -- value parsers: each returns the value to keep, or raises ValueError(what is allowed) ------

_UNIT_NANOS = {
    **dict.fromkeys(("d", "day", "days"), 86_400_000_000_000),
    **dict.fromkeys(("h", "hour", "hours"), 3_600_000_000_000),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60_000_000_000),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1_000_000_000),
    **dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 1_000_000),
    **dict.fromkeys(("us", "µs", "micro", "micros", "microsecond", "microseconds"), 1_000),
    **dict.fromkeys(("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1),
}
_DURATION = re.compile(r"^\s*(\d+)\s*([^\d\s]*)\s*$")
DURATION_FORMS = "a duration such as '10 s', '1 min', '500 ms', '1 h' (a bare number is milliseconds)"


def parse_duration(value: Any) -> int:
    """Milliseconds of a Flink duration: ``"60 s"``, ``"1 min"``, ``"500ms"``, ``60000`` (ms),
    a ``datetime.timedelta`` or a flowpoint ``Duration``. Raises ``ValueError``."""
    if isinstance(value, Duration):
        return value.to_milliseconds()
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m and m.group(2).lower() in _UNIT_NANOS:
            return int(m.group(1)) * _UNIT_NANOS[m.group(2).lower()] // 1_000_000
    msg = DURATION_FORMS
    raise ValueError(msg)


def format_duration(ms: int) -> str:
    """``10000`` -> ``"10 s"``: the largest unit that divides ``ms`` (readable and parseable)."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def parse_bool(value: Any) -> bool:
    """``True``/``False`` or the strings ``true``/``false`` in any case, as Flink. Raises ``ValueError``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    msg = "true or false"
    raise ValueError(msg)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_LOCATION_FORMS = "an absolute path or a URI with a scheme (/data/ck, file:///data/ck, s3://bucket/ck, hdfs://namenode:8020/ck)"


def parse_uri(value: Any) -> str:
    """A checkpoint/savepoint directory as a URI; a bare local path becomes ``file:///abs/path``."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        msg = "a directory URI such as 'file:///data/checkpoints', 'hdfs://namenode:8020/flink/ck', 's3://bucket/ck' or a local path"
        raise ValueError(msg)
    value = value.strip()
    if _SCHEME.match(value) or value.startswith("file:/"):
        return value
    return "file://" + os.path.abspath(os.path.expanduser(value))


def _duration(min_ms: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        try:
            ms = parse_duration(value)
        except ValueError:
            ms = None
        if ms is None or ms < min_ms:
            msg = f"{DURATION_FORMS}, at least {min_ms} ms"
            raise ValueError(msg)
        return ms

    return parse


def _int(min_value: int, max_value: int | None = None, meaning: str = "") -> Callable[[Any], int]:
    """An integer in ``min_value..max_value``; ``meaning`` follows the range in the message."""
    allowed = f"an integer >= {min_value}" if max_value is None else f"an integer from {min_value} to {max_value}"
    allowed += f" ({meaning})" if meaning else ""

    def parse(value: Any) -> int:
        try:
            n = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
        except ValueError:
            n = None
        if isinstance(value, (bool, float)) or n is None or n < min_value or (max_value is not None and n > max_value):
            raise ValueError(allowed)
        return n

    return parse


def absolute_location(value: Any) -> str:
    """``value`` (a path or URI) unchanged if it is an absolute path or a URI with a scheme;
    ValueError otherwise: a relative path would depend on the directory the driver happens to
    start in, and executors start elsewhere."""
    raw = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(_LOCATION_FORMS)
    raw = raw.strip()
    if not (_SCHEME.match(raw) or raw.startswith("file:/") or os.path.isabs(os.path.expanduser(raw))):
        msg = f"{_LOCATION_FORMS}; a relative path would resolve against the current directory (here {os.path.abspath(raw)})"
        raise ValueError(msg)
    return raw


def parse_directory_uri(value: Any) -> str:
    """:func:`parse_uri` of an absolute path or a URI with a scheme (:func:`absolute_location`)."""
    return parse_uri(absolute_location(value))


def _float(low: float, high: float | None, low_open: bool) -> Callable[[Any], float]:
    bounds = f"> {low}" if low_open else f">= {low}"
    bounds += f" and <= {high}" if high is not None else ""

    def parse(value: Any) -> float:
        try:
            x = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            x = None
        if x is None or math.isnan(x) or x < low or (low_open and x == low) or (high is not None and x > high):
            msg = f"a number {bounds}"
            raise ValueError(msg)
        return x

    return parse


_MEMORY_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
                 "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_memory_size(value: Any) -> int:
    """Flink's MemorySize: bytes as an integer, or ``"64 mb"``, ``"1g"``, ``"512kb"`` (units in
    powers of 1024, as Flink). Raises ``ValueError``."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _MEMORY_UNITS:
            msg = "a memory size: bytes, or a number with a unit (64 mb, 1 gb, 512 kb)"
            raise ValueError(msg)
        n = int(m.group(1)) * _MEMORY_UNITS[unit]
    return n


def _memory(min_bytes: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        n = parse_memory_size(value)
        if n < min_bytes:
            msg = f"a memory size of at least {min_bytes} bytes"
            raise ValueError(msg)
        return n

    return parse


def _choice(canonical: dict[str, str]) -> Callable[[Any], str]:
    """Case-insensitive names (or Enum members) -> the canonical spelling."""
    allowed = " | ".join(dict.fromkeys(canonical.values()))

    def parse(value: Any) -> str:
        name = value.name if isinstance(value, Enum) else value
        if isinstance(name, str) and name.strip().lower() in canonical:
            return canonical[name.strip().lower()]
        msg = f"one of {allowed}"
        raise ValueError(msg)

    return parse


FILE_MODES = ("0600", "0640", "0604", "0644")


def _file_mode(value: Any) -> str:
    """An octal file mode in which only the owner writes (``"640"``, ``"0o640"`` and 640 are 0640,
    and so is 416 = 0o640, what YAML makes of an unquoted 0640)."""
    if isinstance(value, int) and not isinstance(value, bool) and f"0{value:o}" in FILE_MODES:
        return f"0{value:o}"
    text = str(value).strip().lower().removeprefix("0o") if not isinstance(value, bool) else ""
    mode = f"0{text.lstrip('0')}" if text.isdigit() else ""
    if mode not in FILE_MODES:
        msg = f"an octal file mode in which only the owner writes: {' | '.join(FILE_MODES)}"
        raise ValueError(msg)
    return mode


PORT_RANGE_FORMS = "a port (9250), a range such as 9250-9260, or 0 (any free port)"


def port_range(value: Any) -> list[int]:
    """The ports of ``"9250"``, ``"9250-9260"`` (both ends included) or ``0``, in order. Raises
    ``ValueError``."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    try:
        low, _, high = text.partition("-")
        ports = list(range(int(low), int(high or low) + 1))
    except ValueError:
        ports = []
    if not ports or ports[0] < 0 or ports[-1] > 65535 or (0 in ports and len(ports) > 1):
        raise ValueError(PORT_RANGE_FORMS)
    return ports


def _port_range(value: Any) -> str:
    ports = port_range(value)
    return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"


def _names(*names: str) -> dict[str, str]:
    return {n.lower(): n for n in names}


RESTART_STRATEGY_TYPES = {
    **dict.fromkeys(("none", "off", "disable"), "none"),
    **dict.fromkeys(("fixed-delay", "fixeddelay"), "fixed-delay"),
    **dict.fromkeys(("failure-rate", "failurerate"), "failure-rate"),
    **dict.fromkeys(("exponential-delay", "exponentialdelay"), "exponential-delay"),
}
RETENTIONS = ("RETAIN_ON_CANCELLATION", "DELETE_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS")


@dataclass(frozen=True)
class Option:
    key: str
    default: Any
    type: type
    description: str
    parse: Callable[[Any], Any] | None = None  # raises ValueError(what is allowed)


OPTIONS = {
    o.key: o
    for o in [
        Option("spark.master", None, str, "Spark master URL; default local[*,4] (local, 4 task attempts)"),
        Option("parallelism.default", None, int, "default parallelism of operators; default: Spark's default parallelism", _int(1)),
        Option("pipeline.max-parallelism", None, int, "default max parallelism (number of key groups), 1 to 32768", _int(1, 32768)),
        Option("pipeline.name", None, str, "job name"),
        Option("pipeline.auto-watermark-interval", 200, int, "periodic watermarks: flowpoint emits them after every source batch and at every epoch; 0 turns them off (as in Flink: only watermarks from on_event, and the final one at the end of input)", _duration(0)),
        Option("pipeline.operator-chaining.enabled", True, bool, "false: every operator runs in a task of its own, with an exchange between any two (disable_operator_chaining())", parse_bool),
        Option("python.files", None, str, "comma-separated Python files, packages or zips shipped to every executor (SparkContext.addPyFile) when the job starts (add_python_file(); run -pyfs); a directory is shipped zipped"),
        Option("python.requirements", None, str, "a requirements file (run -pyreq): pip install --target into $FLOWPOINT_HOME/python-requirements/<hash> on the driver, shipped to every executor and put on its Python path"),
        Option("python.archives", None, str, "comma-separated archives, each path#alias (run -pyarch): unpacked on every executor into the folder alias (SparkContext.addArchive)"),
        Option("pipeline.auto-generate-uids", True, bool, "false: every operator must have a uid(...) (the job fails to build naming the operators without one)", parse_bool),
        Option("pipeline.object-reuse", False, bool, "accepted for compatibility; no meaning here (records are Python objects, never copied between chained operators)", parse_bool),
        Option("pipeline.closure-cleaner-level", "RECURSIVE", str, "accepted for compatibility; no meaning here (functions are pickled with cloudpickle)"),
        Option("pipeline.generic-types", True, bool, "accepted for compatibility; no meaning here (no Kryo)", parse_bool),
        Option("pipeline.force-kryo", False, bool, "accepted for compatibility; no meaning here (no Kryo)", parse_bool),
        Option("pipeline.force-avro", False, bool, "accepted for compatibility; no meaning here (no Avro serializer for records)", parse_bool),
        Option("metrics.latency.interval", 0, int, "accepted for compatibility; latency markers are not emitted", _duration(0)),
        Option("task.cancellation.interval", 30_000, int, "accepted for compatibility; cancellation stops the Spark job", _duration(0)),
        Option("task.cancellation.timeout", 180_000, int, "accepted for compatibility; cancellation stops the Spark job", _duration(0)),
        Option("execution.checkpointing.snapshot-compression", False, bool, "accepted for compatibility; snapshot files are not compressed", parse_bool),
        Option("execution.runtime-mode", "STREAMING", str, "STREAMING | BATCH | AUTOMATIC: BATCH (or AUTOMATIC with only bounded sources) emits final results only", _choice(_names("STREAMING", "BATCH", "AUTOMATIC"))),
        Option("execution.runtime", "auto", str, "auto | continuous | epoch: how a STREAMING job runs on Spark (docs/execution.md); auto runs it continuously when Spark offers every slot it needs at once, else in epochs; BATCH always runs in epochs", _choice(_names("auto", "continuous", "epoch"))),
        Option("slot.request.timeout", 60_000, int, "continuous runtime on a cluster: how long a run waits for executors with enough task slots to register (after a lost executor, say) before the job fails naming both numbers", _duration(0)),
        Option("execution.continuous.control-host", None, str, "continuous runtime: the address of this process that the run's tasks connect to; default 127.0.0.1 for a local master, spark.driver.host on a cluster, and on Spark Connect the address this host reaches the server from (checked by a Spark task before the job starts: docs/deployment.md)"),
        Option("execution.buffer-timeout", 100, int, "continuous runtime: ms after which an operator's partly filled output buffer is sent on (0: after every input)", _duration(0)),
        Option("taskmanager.network.memory.buffers-per-channel", 8, int, "continuous runtime: frames each input channel holds before its sender waits (backpressure)", _int(1, 4096)),
        Option("execution.buffer-max-batches", 64, int, "continuous runtime: output batches an operator buffers before it sends them without waiting for the buffer timeout", _int(1, 1 << 20)),
        Option("execution.epoch.max-records", 100_000, int, "records read per epoch over all source splits (>= 1)", _int(1)),
        Option("execution.epoch.interval", 200, int, "ms to wait before polling sources that had no new records", _duration(0)),
        Option(
            "execution.epoch.idle-interval", 1000, int,
            "ms between epochs without new records in jobs with timers, windows or watermarks (time still passes)", _duration(0),
        ),
        Option("execution.progress.interval", 1000, int, "ms between progress lines (0: every epoch, -1: never)", _int(-1, None, "ms between progress lines; 0: every epoch, -1: never")),
        Option("execution.progress.display", "auto", str, "auto | terminal: where a job shows its progress; auto: in a Jupyter notebook (an IPython kernel) one display with the dashboard link and a status line updated in place, elsewhere lines on standard error; terminal: the lines in a notebook too", _choice(_names("auto", "terminal"))),
        Option("state.working.dir", None, str, "directory for working-state delta files (executor local disk)"),
        Option("state.working.remote-dir", None, str, "durable storage URI (s3://, hdfs://, file://) for committed working-state changes, readable by every executor; default: <checkpoint dir>/<job id>/taskowned when checkpoints go to remote storage, else <state.working.dir>/durable", absolute_location),
        Option("state.working.compaction-bytes", 1 << 20, int, "delta bytes before a partition writes a new base snapshot (>= 0)", _int(0)),
        # -- checkpointing (durations are kept in ms) --
        Option("execution.checkpointing.interval", None, int, "checkpoint every this often, at the first epoch boundary after it (so 1 ms: every epoch); unset: checkpointing off", _duration(1)),
        Option("execution.checkpointing.mode", "EXACTLY_ONCE", str, "EXACTLY_ONCE | AT_LEAST_ONCE; on epochs both give exactly-once state (every checkpoint is a cut at an epoch boundary); on the continuous runtime AT_LEAST_ONCE does not align barriers: no input waits for another, and records that passed a barrier early count again after a restore", _choice(_names("EXACTLY_ONCE", "AT_LEAST_ONCE"))),
        Option("execution.checkpointing.timeout", 600_000, int, "a checkpoint not complete after this long is declined", _duration(10)),
        Option("execution.checkpointing.aligned-checkpoint-timeout", 0, int, "unaligned checkpoints: 0 starts every checkpoint unaligned; longer starts it aligned and switches it to unaligned once its barrier is older than this", _duration(0)),
        Option("execution.checkpointing.min-pause", 0, int, "least time between the end of one checkpoint and the start of the next", _duration(0)),
        Option("execution.checkpointing.max-concurrent-checkpoints", 1, int, "checkpoints in progress at once on the continuous runtime (their barriers flow one after another); the epoch runtime takes them one at a time, at epoch boundaries", _int(1, 64)),
        Option("execution.checkpointing.tolerable-failed-checkpoints", 0, int, "consecutive failed checkpoints tolerated before the job fails over", _int(0)),
        Option("execution.checkpointing.externalized-checkpoint-retention", "NO_EXTERNALIZED_CHECKPOINTS", str, "RETAIN_ON_CANCELLATION | DELETE_ON_CANCELLATION | NO_EXTERNALIZED_CHECKPOINTS (default, as Flink 1.19: checkpoints are deleted when the job finishes or is cancelled; a failed job keeps them)", _choice(_names(*RETENTIONS))),
        Option("execution.checkpointing.unaligned", False, bool, "continuous runtime, EXACTLY_ONCE: checkpoint barriers overtake in-flight records, which are stored with the checkpoint as channel state (checkpoints complete under backpressure); epochs have no in-flight data", parse_bool),
        Option("state.backend.type", "hashmap", str, "working-state backend: hashmap | rocksdb", _choice(_names("hashmap", "rocksdb"))),
        Option("state.backend.rocksdb.memory.managed", True, bool, "RocksDB: the DBs of each slot (Python worker) share one block cache, and their memtables are charged to it, so the slot's RocksDB memory stays within state.backend.rocksdb.memory.fixed-per-slot (default 256 mb); false: each DB has its own block cache and write buffers (state.backend.rocksdb.block.cache-size, .writebuffer.*), without a bound per slot", parse_bool),
        Option("state.backend.rocksdb.memory.fixed-per-slot", None, int, "RocksDB: the memory of each slot's (Python worker's) DBs together, block cache and memtables (a memory size: 256 mb); unset: 256 mb when memory.managed", _memory(8 << 20)),
        Option("state.backend.rocksdb.memory.write-buffer-ratio", 0.5, float, "RocksDB: the share of a slot's bounded memory that memtables may take (0 < ratio < 1)", _float(0.0, 0.99, True)),
        Option("state.backend.rocksdb.block.cache-size", 8 << 20, int, "RocksDB with memory.managed false and no fixed-per-slot: each DB's block cache (a memory size)", _memory(64 << 10)),
        Option("state.backend.rocksdb.writebuffer.size", 64 << 20, int, "RocksDB: the size of one memtable of a DB (a memory size); a checkpoint flushes it", _memory(64 << 10)),
        Option("state.backend.rocksdb.writebuffer.count", 2, int, "RocksDB: memtables a DB may hold before writes wait for a flush", _int(2, 64)),
        Option("state.backend.incremental", False, bool, "incremental checkpoints (rocksdb only): upload only new files; HashMap checkpoints are changelogs by default (state.backend.hashmap.changelog.*)", parse_bool),
        Option(
            "state.backend.hashmap.changelog.max-ratio", 0.5, float,
            "HashMap checkpoints upload a changelog (the keys changed since the previous checkpoint) instead of all state, and a full snapshot (materialization) "
            "once the changelog parts since the last full snapshot would exceed this share of its size; 0: a full snapshot at every checkpoint (0..1000)",
            _float(0.0, 1000.0, low_open=False),
        ),
        Option(
            "state.backend.changelog.enabled", False, bool,
            "RocksDB: checkpoints upload the changes committed since the previous checkpoint (a changelog part) on top of the last materialization "
            "(the DB's files in shared/), as Flink's changelog state backend, so a checkpoint uploads what changed whatever compaction rewrote; "
            "HashMap checkpoints are changelogs anyway (state.backend.hashmap.changelog.*)",
            parse_bool,
        ),
        Option(
            "state.backend.changelog.periodic-materialize.interval", 10 * 60_000, int,
            "RocksDB with the changelog: how often a checkpoint materializes (uploads the DB's new files and starts a new chain); "
            "a chain's changelog parts larger than its materialization also materialize (bounds what a restore replays)",
            _duration(1),
        ),
        Option(
            "state.backend.hashmap.changelog.max-parts", 20, int,
            "HashMap checkpoints: at most this many changelog parts follow a full snapshot before the next checkpoint writes a full one (bounds what a restore replays; >= 1)",
            _int(1),
        ),
        Option("state.checkpoints.dir", None, str, "checkpoint directory URI (file://, hdfs://, s3://; an absolute local path becomes file://)", parse_directory_uri),
        Option("state.savepoints.dir", None, str, "default savepoint directory URI (absolute path or URI with a scheme)", parse_directory_uri),
        Option("state.checkpoints.num-retained", 1, int, "completed checkpoints kept (>= 1)", _int(1)),
        Option("state.checkpoints.file-mode", "0600", str, "mode of the checkpoint and savepoint files flowpoint creates on a local filesystem: 0600 (default) | 0640 | 0604 | 0644; directories get the same bits plus search where readable (0700, 0750, ...); other filesystems keep their own permissions", _file_mode),
        Option("security.trust-shared-directories", False, bool, "true: accept local checkpoint, savepoint and remote working directories (and the run directories --resume considers) and FileSink directories that other users own or can write; false: refuse them (whoever can write them can make the job run code, or change its output before it is committed)", parse_bool),
        Option("state.checkpoint-storage", None, str, "jobmanager | filesystem; default filesystem when state.checkpoints.dir is set, else jobmanager", _choice(_names("jobmanager", "filesystem"))),
        Option("execution.savepoint.path", None, str, "checkpoint or savepoint to restore the job from (-s)"),
        Option(
            "execution.savepoint.trust-from-others", False, bool,
            "true: restore (and read with state_reader) a checkpoint or savepoint whose _metadata is not signed with this installation's key or a trusted one "
            "(another installation's, one changed after it was signed, or one written before checkpoints were signed): restoring unpickles whatever its writer chose, "
            "as you (--trust-savepoint-from-others); false: refuse it naming the file",
            parse_bool,
        ),
        Option("security.checkpoint-signing.key-file", None, str, "the key file that signs and verifies _metadata of checkpoints and savepoints (HMAC-SHA256); default $FLOWPOINT_HOME/checkpoint-key, created on first use. Set it where the driver has no FLOWPOINT_HOME of yours (cluster deploy mode): a copy of your key, mode 0600"),
        Option("security.checkpoint-signing.trusted-key-files", None, str, "comma-separated key files of other flowpoint installations whose checkpoints and savepoints this one restores (verification only; each mode 0600)"),
        Option("execution.savepoint.ignore-unclaimed-state", False, bool, "restore even when some state has no operator (--allow-non-restored-state)", parse_bool),
        Option("execution.state-recovery.from-latest", False, bool, "restore the newest retained checkpoint of this job's previous run under state.checkpoints.dir (--resume): the run of the same job name and fingerprint (operator uids, max parallelism) not yet resumed by another", parse_bool),
        Option("execution.state-recovery.from-job", None, str, "restore the newest retained checkpoint of this run (a job id or a unique prefix of one) under state.checkpoints.dir (--resume <job-id>)"),
        Option("execution.state-recovery.as-of", None, str, "with --resume: restore the newest retained checkpoint of this job completed at or before this time (--as-of; ISO 8601 such as '2026-11-26 10:00', this machine's time zone when it has no offset, or milliseconds since the epoch), from any run of the job that is not running, including runs already resumed"),
        Option("execution.state-recovery.fallback-on-corruption", False, bool, "with --resume: when the newest retained checkpoint does not verify (a checksum or size mismatch), restore the newest one that does (--resume-fallback); false: fail naming the file and the previous checkpoint", parse_bool),
        # -- restart strategies --
        Option("restart-strategy.type", None, str, "none | fixed-delay | failure-rate | exponential-delay (also off, disable, fixeddelay, failurerate, exponentialdelay); unset: exponential-delay with checkpointing, else none", _choice(RESTART_STRATEGY_TYPES)),
        Option("restart-strategy.repeated-failure.fail-fast", None, str, "none | data-errors | all: whether a user function failing again on the same record the same way after a restart fails the job at once instead of restarting as the strategy allows; data-errors: only when the exception is one of Python's data errors (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, UnicodeError); unset: data-errors when no restart strategy is set (in code or restart-strategy.type), none when one is", _choice(_names("none", "data-errors", "all"))),
        Option("restart-strategy.fixed-delay.attempts", 1, int, "restarts before the job fails", _int(0)),
        Option("restart-strategy.fixed-delay.delay", 1000, int, "delay before each restart", _duration(0)),
        Option("restart-strategy.failure-rate.max-failures-per-interval", 1, int, "failures tolerated within the interval; one more fails the job", _int(1)),
        Option("restart-strategy.failure-rate.failure-rate-interval", 60_000, int, "the interval failures are counted in", _duration(1)),
        Option("restart-strategy.failure-rate.delay", 1000, int, "delay before each restart", _duration(0)),
        Option("restart-strategy.exponential-delay.initial-backoff", 1000, int, "delay before the first restart", _duration(1)),
        Option("restart-strategy.exponential-delay.max-backoff", 60_000, int, "largest delay between restarts", _duration(1)),
        Option("restart-strategy.exponential-delay.backoff-multiplier", 1.5, float, "each restart's delay is the previous one times this (> 1)", _float(1.0, None, low_open=True)),
        Option("restart-strategy.exponential-delay.reset-backoff-threshold", 3_600_000, int, "a job that ran this long since its last restart starts again from the initial backoff", _duration(1)),
        Option("restart-strategy.exponential-delay.jitter-factor", 0.1, float, "random spread of each delay, +- this fraction (0..1)", _float(0.0, 1.0, low_open=False)),
        Option("restart-strategy.exponential-delay.attempts-before-reset-backoff", None, int, "restarts before the job fails, counted since the last reset; unset: unlimited", _int(1)),
        # -- filesystem options of checkpoint and state storage (flowpoint.api.storage_options): the
        # driver and every executor open storage with them; other s3./hdfs./gs./fs. keys pass as well
        Option("s3.endpoint", None, str, "S3 endpoint URL of an S3-compatible store (MinIO, Ceph, ...); default AWS, or $AWS_ENDPOINT_URL"),
        Option("s3.access-key", None, str, "S3 access key id; default the AWS credential chain of each process"),
        Option("s3.secret-key", None, str, "S3 secret access key"),
        Option("s3.session-token", None, str, "S3 session token of temporary credentials"),
        Option("s3.region", None, str, "S3 region; default $AWS_REGION, else us-east-1 with a custom endpoint"),
        Option("s3.path.style.access", None, bool, "true: path-style requests (endpoint/bucket/key); false: virtual-hosted (bucket.endpoint/key)", parse_bool),
        Option("s3.connect-timeout", None, float, "seconds to wait for a connection to S3 (default 5)", _float(0.0, None, low_open=True)),
        Option("s3.request-timeout", None, float, "seconds to wait for an S3 request (default 30)", _float(0.0, None, low_open=True)),
        Option("s3.max-attempts", None, int, "attempts of each S3 request (default 3)", _int(1)),
        # -- control plane --
        Option("control.registry.dir", None, str, "directory of the local job registry the CLI reads (flowpoint list); default $FLOWPOINT_HOME/jobs, else ~/.flowpoint/jobs"),
        Option("control.port", "0", str, "port of a job process's control endpoint on 127.0.0.1: 0 (any free port), a port, or a range such as 50100-50200"),
        # -- metrics (docs/metrics.md) --
        Option("metrics.reporter.prom.port", None, str, "set: serve the job's metrics to Prometheus at http://<host>:<port>/metrics from the job's driver process; a port, a range such as 9250-9260 (the first free one, as Flink's reporter), or 0 (any free port); unset: no endpoint", _port_range),
        Option("metrics.reporter.prom.host", "127.0.0.1", str, "address the Prometheus endpoint binds to; anything but loopback lets whoever reaches the port read the job's metrics (no token: scrapers send none)"),
        Option("metrics.reporter.prom.factory.class", None, str, "accepted for compatibility (Flink's reporter class); the endpoint is on when metrics.reporter.prom.port is set"),
        Option("metrics.reporter.prom.class", None, str, "accepted for compatibility (Flink 1.x's reporter class); the endpoint is on when metrics.reporter.prom.port is set"),
        # -- the configuration itself --
        Option("config.strict", None, bool, "unknown configuration keys fail (true) or are warned about when close to a known key (false); unset: true for -D, false for a configuration dict and flowpoint.yaml", parse_bool),
    ]
}

# Other spellings of a key (Flink 2 names, Flink 1.x deprecated names) -> the key kept.
ALIASES = {
    "state.backend": "state.backend.type",
    "execution.checkpointing.incremental": "state.backend.incremental",
    "execution.checkpointing.dir": "state.checkpoints.dir",
    "execution.checkpointing.savepoint-dir": "state.savepoints.dir",
    "execution.checkpointing.num-retained": "state.checkpoints.num-retained",
    "execution.checkpointing.storage": "state.checkpoint-storage",
    "execution.checkpointing.unaligned.enabled": "execution.checkpointing.unaligned",
    "restart-strategy": "restart-strategy.type",
    "s3.access.key": "s3.access-key",
    "s3.secret.key": "s3.secret-key",
    "s3.path-style-access": "s3.path.style.access",
    "execution.state-recovery.path": "execution.savepoint.path",
    "execution.state-recovery.ignore-unclaimed-state": "execution.savepoint.ignore-unclaimed-state",
}

# Keys flowpoint passes on without knowing them all: ``spark.*`` to the SparkSession it creates
# (flowpoint.spark.session), filesystem options to checkpoint and state storage on the driver and
# the executors (flowpoint.api.storage_options).
SPARK_PREFIX = "spark."
STORAGE_PREFIXES = ("s3.", "hdfs.", "gs.", "fs.")
PASS_THROUGH_PREFIXES = (SPARK_PREFIX, *STORAGE_PREFIXES)


def canonical_key(key: str) -> str:
    return ALIASES.get(key, key)


# -- unknown keys: a typo is warned about, or refused where config.strict is on -----------------

STRICT_KEY = "config.strict"
KNOWN_KEYS = tuple(sorted({*OPTIONS, *ALIASES}))
_TYPO_CUTOFF = 0.85  # similarity above which an unknown key is taken for a misspelt known one
_HINT_CUTOFF = 0.6  # similarity above which a known key is worth naming in an error

def nearest_known_key(key: str, cutoff: float = _HINT_CUTOFF) -> str | None:
    """The known key most like ``key`` (a ``spark.*`` or filesystem key is compared only with
    known keys of its own family), None if none is at least ``cutoff`` similar."""
    family = next((p for p in PASS_THROUGH_PREFIXES if key.startswith(p)), None)
    known = [k for k in KNOWN_KEYS if k.startswith(family)] if family else list(KNOWN_KEYS)
    folded = {k.lower(): k for k in known}
    if key.lower() in folded:  # only the case differs: keys are case-sensitive, as Flink's
        return folded[key.lower()]
    close = difflib.get_close_matches(key, known, n=1, cutoff=cutoff)
    return close[0] if close else None


def unknown_key_problem(key: str, strict: bool) -> str | None:
    """What is wrong with ``key`` (None: nothing). A known key (any spelling) is fine. A key of a
    pass-through family (``spark.*`` for Spark, ``s3.*``/``hdfs.*``/``gs.*``/``fs.*`` for
    storage) is flowpoint's to pass on, so only one close to a known key of its family is taken
    for a typo. Any other unknown key is a typo when close to a known key; with ``strict`` it is
    an error either way, since flowpoint does not read it."""
    if not isinstance(key, str):
        return f"configuration keys are strings; got {type(key).__name__} {key!r}"
    if key in OPTIONS or key in ALIASES:
        return None
    passed_on = key.startswith(PASS_THROUGH_PREFIXES)
    typo = nearest_known_key(key, _TYPO_CUTOFF)
    if typo is not None:
        return f"unknown key {key!r} (did you mean {typo!r}?)"
    if passed_on or not strict:
        return None
    hint = nearest_known_key(key)
    known = f"the nearest known key is {hint!r}" if hint else "no known key is like it"
    return f"unknown key {key!r}: flowpoint does not read it ({known})"


def check_key(key: str, strict: bool, where: str, relax: str) -> None:
    """Warn about an unknown or misspelt ``key`` of ``where`` (a configuration dict, -D,
    flowpoint.yaml), or raise ConfigurationError when ``strict``; ``relax`` says how to make
    it a warning."""
    problem = unknown_key_problem(key, strict)
    if problem is None:
        return
    if strict:
        msg = f"{where}: {problem}. Correct the key, or {relax} to only warn about unknown keys"
        raise ConfigurationError(msg)
    log.warning("%s: %s", where, problem)


def parse_option(key: str, value: Any) -> Any:
    """``value`` checked and converted for ``key`` (any spelling); unknown keys pass unchanged."""
    option = OPTIONS.get(canonical_key(key))
    if option is None or value is None:
        return value
    try:
        if option.parse is not None:
            return option.parse(value)
        return value if isinstance(value, option.type) else option.type(value)
    except (TypeError, ValueError) as e:
        expected = str(e) if option.parse is not None else option.type.__name__
        name = repr(key) if key == option.key else f"{key!r} (another name of {option.key!r})"
        msg = f"configuration {name} must be {expected}; got {value!r}"
        raise ConfigurationError(msg) from None


class Configuration:
    """A set of ``key: value`` settings; unknown keys are kept for later layers and user code.

    ``set`` (and the constructor) check each key: a misspelt known key is warned about, or
    refused with ConfigurationError where ``config.strict`` is true (set in this configuration,
    else by ``flowpoint run -D config.strict=true``; default false)."""

    def __init__(self, values: dict[str, Any] | None = None):
        self._values: dict[str, Any] = {}
        values = dict(values or {})
        if STRICT_KEY in values:  # first: it decides how the other keys are checked
            self.set(STRICT_KEY, values.pop(STRICT_KEY))
        for k, v in values.items():
            self.set(k, v)

    def set(self, key: str, value: Any) -> Configuration:
        check_key(key, self.strict(), "configuration", f"set {STRICT_KEY}: false")
        return self.put(key, value)

    set_string = set
    set_integer = set
    set_boolean = set

    def put(self, key: str, value: Any) -> Configuration:
        """Set a key whose name its source has already checked (-D, flowpoint.yaml): the value
        is checked and converted, the name is not checked again."""
        self._values[canonical_key(key)] = parse_option(key, value)
        return self

    def strict(self) -> bool:
        """Whether unknown keys set on this configuration are errors (``config.strict``)."""
        own = self._values.get(STRICT_KEY)
        if own is not None:
            return bool(own)
        return bool(cli_context.current().strict)

    def get(self, key: str, default: Any = None) -> Any:
        key = canonical_key(key)
        if key in self._values:
            return self._values[key]
        option = OPTIONS.get(key)
        if option is not None and default is None:
            return option.default
        return default

    def contains_key(self, key: str) -> bool:
        return canonical_key(key) in self._values

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def copy(self) -> Configuration:
        other = Configuration()
        other._values = dict(self._values)
        return other
