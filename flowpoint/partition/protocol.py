"""The driver-to-task protocol: what a task of one epoch receives and what it acknowledges.

Every task of an epoch gets the common :class:`UnitSpec` (with the Spark job's closure) and
only its own partition's :class:`TaskSlice` (routed to it as a record of its input), never
other partitions' state chains. A task answers with one :class:`TaskAck`; the coordinator
commits the epoch only when every task acknowledged. Checkpoint and savepoint parts a task
wrote travel back as :class:`PartHandle` lists: paths relative to the checkpoint or savepoint
directory, sizes and SHA-256 checksums, never state bytes (except for driver-memory checkpoint
storage, which executors cannot reach; Flink's JobManagerCheckpointStorage does the same).
:class:`PartHandle` and :class:`CheckpointTarget` are snapshot storage's own
(:mod:`flowpoint.checkpoint.part_writer`, the one writer of parts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowpoint.checkpoint.part_writer import CheckpointTarget, PartHandle
from flowpoint.errors import FlowpointError
from flowpoint.partition.committed_chain import CommittedChain, TaskStateAck


@dataclass(frozen=True)
class StateLocation:
    """Where a job's working state lives: the executor-local cache and the durable copy."""

    run_key: str  # "<job id>/run-<n>": a restart begins a new run
    local_dir: str  # state.working.dir on the executor's own disk (a cache); "": each host's per-user default
    durable_uri: str  # shared storage every executor can read: committed bases and deltas
    backend: str = "hashmap"
    storage_options: tuple[tuple[str, str], ...] = ()  # s3.endpoint, credentials, ...
    incremental: bool = False  # RocksDB: checkpoints reuse SST files already in shared/
    # HashMap checkpoints (state.backend.hashmap.changelog.*): when ``changelog`` (checkpoints on,
    # filesystem storage, max-ratio > 0) tasks track changed keys and a checkpoint part is a
    # changelog until the chain's changelog bytes would exceed ``changelog_max_ratio`` of its full
    # snapshot, or it has ``changelog_max_parts`` changelog parts; then a full snapshot
    changelog: bool = False
    changelog_max_ratio: float = 0.5
    changelog_max_parts: int = 20
    rocksdb_memory: tuple[tuple[str, Any], ...] = ()  # RocksDBMemory.fields() (state.backend.rocksdb.memory.*)
    # RocksDB checkpoints as a chain: a materialization, then changelog parts (state.backend.changelog.*)
    rocksdb_changelog: bool = False
    materialize_interval_ms: int = 600_000

    @property
    def options(self) -> dict[str, str]:
        return dict(self.storage_options)


@dataclass
class UnitSpec:
    """What every task of one unit of work needs to know: an epoch's tasks get it with the
    epoch's Spark job; a continuous subtask makes one per segment for its operator chain."""

    job_id: str  # the run key (see StateLocation)
    unit: int  # the epoch, or the continuous runtime's segment
    location: StateLocation
    last: bool = False
    checkpoints_completed: tuple[int, ...] = ()  # for CheckpointListener.notify_checkpoint_complete
    checkpoints_aborted: tuple[int, ...] = ()
    checkpoint: CheckpointTarget | None = None
    processing_time: int = 0  # epoch ms: the processing time every task of the epoch sees
    watermarks: dict[str, tuple[int, bool]] = field(default_factory=dict)  # channel -> (watermark, idle) at the start
    splits: dict[str, int] = field(default_factory=dict)  # source uid -> number of splits (watermark channels)
    generators: dict[str, bytes] = field(default_factory=dict)  # watermark generator states (event_time.py)
    restored: frozenset[str] = frozenset()  # uids whose state came from a restore (is_restored())


@dataclass
class ContinuousSpec:
    """What every slot of a continuous run needs (docs/architecture.md, section 4b), shipped once per run."""

    run_key: str
    location: StateLocation
    driver: tuple[str, int]  # the driver's control channel
    secret: bytes  # this run's channel secret (never logged)
    slots: int
    first_segment: int  # the segment (epoch) number the run continues from
    attempt: int = 0  # the run: restarts so far (RuntimeContext.get_attempt_number())
    buffer_timeout_ms: int = 100
    buffers_per_channel: int = 8
    max_frame_items: int = 64
    watermark_interval_ms: int = 200
    watermarks: dict[str, tuple[int, bool]] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    generators: dict[str, bytes] = field(default_factory=dict)
    restored: frozenset[str] = frozenset()
    # False: checkpointing mode AT_LEAST_ONCE, barriers are not aligned (seed 002): a subtask
    # snapshots once a checkpoint's barrier arrived on every input, and keeps reading the inputs
    # that delivered it meanwhile
    aligned: bool = True
    # True: unaligned checkpoints (execution.checkpointing.unaligned): checkpoint barriers
    # overtake in-flight frames, which the checkpoint stores as channel state; senders hold
    # credits for their receivers' queues (tasks/channel_state.py)
    unaligned: bool = False

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        return f"ContinuousSpec(run_key={self.run_key!r}, slots={self.slots}, driver={self.driver})"


@dataclass(frozen=True)
class TaskSlice:
    """One partition's share of an epoch: its committed state chain and what to do with it."""

    stage_id: int
    partition: int
    chain: CommittedChain = field(default_factory=CommittedChain)
    compact: bool = False  # write a new base snapshot this epoch
    operator_state: dict[str, dict] = field(default_factory=dict)  # "<uid>:<partition>" -> {name: (mode, items)}
    shared: dict[str, str] = field(default_factory=dict)  # RocksDB incremental: "<uid>/<db id>/<file>/<size>" -> shared/ path
    # downstream partitions' slices this task passes on, unread, as records (edge id, partition,
    # slice) of its output: each slice reaches its task through the epoch's own shuffle
    forward: tuple[tuple[int, int, TaskSlice], ...] = ()
    # unaligned checkpoints: the restored checkpoint's channel state files holding input of
    # this stage (tasks/channel_state.py RestoredChannelFile), fed before any new input
    channel_state: tuple = ()
    # and the watermarks this subtask had seen on each input channel at that checkpoint's cut
    # (channel -> (watermark, idle); "*": one floor for every channel after a rescale)
    input_marks: dict[str, tuple[int, bool]] = field(default_factory=dict)


@dataclass
class OperatorPart:
    """One operator's snapshot of one partition: the files and what they hold."""

    uid: str
    partition: int
    files: list[PartHandle]
    num_keys: int
    sync_ms: float = 0.0
    async_ms: float = 0.0
    lineage: str = ""  # RocksDB: the local DBs' lineage (names of shared SST files are unique within it); HashMap: the run key
    states: dict[str, dict[str, Any]] = field(default_factory=dict)  # state name -> {"kind", "declared", "keys" (HashMap)}
    version: int = 0  # HashMap: the committed epoch the snapshot holds (a changelog's starting point for the next one)
    materialized_ms: int = 0  # RocksDB changelog chains: when the chain's materialization was taken


@dataclass
class TaskAck:
    stage_id: int
    partition: int
    unit: int  # the epoch, or the continuous runtime's segment (the work up to a barrier)
    token: str
    attempt: int
    state: TaskStateAck | None = None
    sink_payloads: dict[int, Any] = field(default_factory=dict)
    records_in: int = 0
    report: Any = None  # MetricReport: the task's metrics (flowpoint/metrics/report.py)
    error: FlowpointError | None = None
    seconds: float = 0.0
    fresh_state: bool = False  # the task rebuilt its partition's state (it was not in this process)
    discarded: bool = False  # the job's last epoch: the task removed its partition's cached state and local files where it ran
    snapshot: list[OperatorPart] | None = None  # the checkpoint parts this task wrote
    snapshot_error: str | None = None  # why the task declined the checkpoint (its parts failed)
    watermarks: dict[str, tuple[int, bool]] = field(default_factory=dict)  # channels this task sent: final marks
    generators: dict[str, bytes] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)  # "<operator name>.<metric>" -> count
    operator_state: dict[str, dict] = field(default_factory=dict)  # CheckpointedFunction state at the epoch's end
    host: str = ""  # executor id the task ran on (locality statistics)
    declared: dict[str, dict[str, dict]] = field(default_factory=dict)  # uid -> state name -> {kind, schema}: what the operators registered
    positions: dict[int, tuple[Any, bool]] = field(default_factory=dict)  # continuous runtime: open splits' (position, finished) at the barrier
    savepoint_parts: list = field(default_factory=list)  # continuous runtime: [(uid, SubtaskState, state counts)] written at a savepoint barrier
    channel_state: Any = None  # unaligned checkpoint: the in-flight frames' file (tasks/channel_state.py ChannelStatePart)
    # unaligned checkpoint: the marks this subtask had seen on each input channel at its cut
    # (behind the senders' marks by the watermarks still in flight)
    input_marks: dict[str, tuple[int, bool]] = field(default_factory=dict)
