"""Keyed state as data (Flink's State Processor API, in Python).

- :func:`state_reader` opens a savepoint or a retained checkpoint: ``operators()`` lists its
  operators (uid, name, parallelism, state names and kinds), ``keyed_state(uid, state_name=None)``
  returns a Spark DataFrame with the columns ``key``, ``namespace``, ``user_key``, ``value``
  (plus ``state_name`` when all states are read), decoded to Python values; ``keyed_state_dict``
  returns the same as ``{key: value}`` (the form of ``result.get_keyed_state``).
- :func:`state_writer` builds a savepoint from data (a Spark or pandas DataFrame, or rows):
  ``state_writer(128).with_keyed_state("counting", "count", df).write("file:///sp")``; a job
  restored from it with ``-s`` sees that state in operator ``uid`` "counting".

Spark is imported only inside :mod:`flowpoint.spark.state_frames`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowpoint.checkpoint.filesystem import split_uri
from flowpoint.checkpoint.readers import CheckpointPin
from flowpoint.checkpoint.savepoint import (
    STATE_KINDS,
    OperatorSnapshot,
    PartState,
    load_operator_state,
    open_for_reading,
    require_operator,
    savepoint_dir_name,
    write_savepoint,
)
from flowpoint.checkpoint.signing import Keyring
from flowpoint.driver.job_status import new_job_id
from flowpoint.driver.live_reads import pin_latest, running_job_checkpoints
from flowpoint.errors import CheckpointError, ConfigurationError
from flowpoint.state.changes import COLUMNS as CHANGE_COLUMNS
from flowpoint.state.changes import state_changes
from flowpoint.state.compatibility import infer_kind
from flowpoint.state.key_identity import KeyedStateMap, keyed_state_maps, state_key
from flowpoint.state.keygroups import (
    assign_to_key_group,
    check_parallelism,
    key_group_range_for_operator,
)
from flowpoint.state.table_rows import state_rows


class StateReader:
    """A savepoint or retained checkpoint opened for reading (see :func:`state_reader`)."""

    def __init__(self, spark: Any, path: str, options: dict[str, str] | None = None, keyring: Keyring | None = None):
        self.spark = spark
        self.path = path
        self.pin: CheckpointPin | None = None  # a running job's checkpoint is pinned (state_reader(job=...))
        self.options, self.keyring = options, keyring
        # values are unpickled: a directory another user can write is not read (as for a
        # restore), nor a _metadata this installation (or one it trusts) did not sign
        self.access, self.metadata = open_for_reading(path, options, keyring, "the directory state_reader reads", "the path given to state_reader")

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    def close(self) -> None:
        """Release the pin on a running job's checkpoint: retention may delete it from now on
        (DataFrames read from it must have been computed)."""
        if self.pin is not None:
            self.pin.release()

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def operators(self) -> list[dict[str, Any]]:
        """``[{"uid", "name", "parallelism", "max_parallelism", "state_names", "states"}]``."""
        out = []
        for op in self.metadata.operators:
            if op.states is not None:
                states = {n: s.get("kind") for n, s in sorted(op.states.items())}
            else:
                states = {n: infer_kind(t) for n, t in sorted(load_operator_state(self.access, self.metadata, op.uid).items())}
            out.append({
                "uid": op.uid, "name": op.name, "parallelism": op.parallelism, "max_parallelism": op.max_parallelism,
                "state_names": sorted(states), "states": states,
            })
        return out

    def diff(self, before: int | str, after: int | str, uid: str, state_name: str) -> Any:
        """What changed in keyed state ``state_name`` of operator ``uid`` from checkpoint (or
        savepoint) ``before`` to ``after``: a Spark DataFrame with the columns key, user_key (a
        MapState's entries, else null), change ("added", "removed", "changed"), before and after
        (null where there is none). An int is a checkpoint id of this reader's job (its
        checkpoint directory; pinned while it is read), a str the path of any checkpoint or
        savepoint."""

        old, kinds = self._state_at(before, uid, state_name)
        new, kinds_after = self._state_at(after, uid, state_name)
        is_map = "map" in (kinds.get(state_name), kinds_after.get(state_name))
        rows = state_changes(old, new, is_map)
        return _adapter(self.spark).values_dataframe(rows, CHANGE_COLUMNS)

    def _state_at(self, ref: int | str, uid: str, state_name: str) -> tuple[Any, dict[str, str]]:
        if isinstance(ref, str):
            reader = StateReader(self.spark, ref, self.options, self.keyring)
            return reader.keyed_state_dict(uid, state_name), reader._kinds(uid)
        if self.metadata.kind != "checkpoint":
            msg = f"diff({ref!r}, ...): a checkpoint id names a checkpoint of a job's checkpoint directory; {self.path} is a {self.metadata.kind}: give paths"
            raise ConfigurationError(msg)
        chk = f"chk-{int(ref)}"
        with CheckpointPin(self.access, int(ref)):
            if not self.access.exists(f"{chk}/_metadata"):
                msg = f"diff: the job has no retained checkpoint {ref} in {self.access.uri()} (`flowpoint checkpoints {self.access.uri()}` lists them)"
                raise CheckpointError(msg)
            reader = StateReader(self.spark, self.access.uri(chk), self.options, self.keyring)
            return reader.keyed_state_dict(uid, state_name), reader._kinds(uid)

    def _kinds(self, uid: str) -> dict[str, str]:
        op = require_operator(self.access, self.metadata, uid)
        return {n: s.get("kind") for n, s in (op.states or {}).items()}

    def _executors_can_read(self) -> bool:
        return not self.access.root_uri.startswith("memory://")  # driver-memory storage: only here

    def keyed_state_dict(self, uid: str, state_name: str | None = None) -> dict:
        """``{key: value}`` of one state, or ``{state name: {key: value}}`` of all (read by
        Spark tasks, one per parallel instance, and merged here)."""
        op = require_operator(self.access, self.metadata, uid)
        if self._executors_can_read():

            tables = _adapter(self.spark).savepoint_tables(self.access, op)
        else:
            tables = load_operator_state(self.access, self.metadata, uid)
        maps = keyed_state_maps(tables)
        return maps if state_name is None else maps.get(state_name, KeyedStateMap())

    def keyed_state(self, uid: str, state_name: str | None = None) -> Any:
        """The keyed state of operator ``uid`` as a Spark DataFrame: one row per key (MapState:
        per key and user key) with columns key, namespace, user_key, value (and state_name
        when ``state_name`` is None). Spark tasks read the files, one per parallel instance."""

        op = require_operator(self.access, self.metadata, uid)
        kinds = {n: s.get("kind") for n, s in (op.states or {}).items()}
        if self._executors_can_read():
            return _adapter(self.spark).savepoint_dataframe(self.access, op, kinds, state_name)
        tables = load_operator_state(self.access, self.metadata, uid)

        return _adapter(self.spark).rows_dataframe(state_rows(tables, kinds, state_name), with_state_name=state_name is None)



def _adapter(spark: Any) -> Any:
    """The Spark adapter of session ``spark``, its module loaded on first use: pyspark is not
    for `import flowpoint` (60 ms)."""
    # lazy: see the docstring
    from flowpoint.spark.adapter_choice import adapter_for

    return adapter_for(spark)


def _struct_as_tuple(value: Any) -> Any:
    """A DataFrame's struct value (a Row, a tuple subclass) as a plain tuple, nested ones too."""
    return tuple(_struct_as_tuple(v) for v in value) if isinstance(value, tuple) else value


def dataframe_rows(df: Any) -> list[tuple]:
    """A Spark DataFrame's rows as tuples of Python values (structs as tuples)."""
    return [tuple(_struct_as_tuple(v) for v in row) for row in df.toLocalIterator()]


def state_reader(
    spark: Any, path: str | None = None, options: dict[str, str] | None = None, *, job: str | None = None,
    trust_savepoint_from_others: bool = False, key_file: str | None = None, trusted_key_files: tuple[str, ...] = (),
) -> StateReader:
    """Open a savepoint or retained checkpoint (directory or ``_metadata``) to read its state;
    ``options`` are filesystem settings (``s3.endpoint``, ``s3.access-key``, ...), which the
    Spark tasks reading the files get too.

    ``job=<job id, a unique prefix of one, or a job name>`` instead of ``path``: the latest
    completed checkpoint of that running job (found through the job registry, as ``flowpoint
    list`` finds it), consistent as of that checkpoint, without stopping the job. The reader pins
    it (flowpoint/checkpoint/readers.py), so that the job's retention keeps it until
    ``reader.close()`` or the end of a ``with state_reader(...) as reader:`` block.

    Reading unpickles the state, so ``_metadata`` must be signed with this installation's key
    (``key_file``, default ``$FLOWPOINT_HOME/checkpoint-key``) or one of ``trusted_key_files``;
    anything else is refused (UntrustedStateError) unless ``trust_savepoint_from_others``
    (docs/checkpoints.md, "Integrity and trust")."""
    keyring = Keyring(key_file, tuple(trusted_key_files), trust_savepoint_from_others)
    if (path is None) == (job is None):
        msg = "state_reader takes a savepoint or checkpoint path, or job=<a running job's id or name>: give one of them"
        raise ConfigurationError(msg)
    if path is not None:
        return StateReader(spark, path, options, keyring)
    job_dir = running_job_checkpoints(job)
    pin, chk_uri = pin_latest(job_dir, options)
    try:
        reader = StateReader(spark, chk_uri, options, keyring)
    except BaseException:
        pin.release()
        raise
    reader.pin = pin
    return reader


@dataclass
class _Operator:
    uid: str
    name: str
    tables: dict[str, dict[Any, Any]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)


class StateWriter:
    """Builds a savepoint from data (see :func:`state_writer`)."""

    def __init__(self, max_parallelism: int = 128, parallelism: int = 1, job_name: str = "state-writer"):
        check_parallelism(parallelism, max_parallelism, "state writer")
        self.max_parallelism = int(max_parallelism)
        self.parallelism = int(parallelism)
        self.job_name = job_name
        self._operators: dict[str, _Operator] = {}

    def with_keyed_state(self, uid: str, state_name: str, data: Any, kind: str = "value", name: str | None = None) -> StateWriter:
        """Add state ``state_name`` of kind value|list|map (also reducing/aggregating, stored as
        a value) to operator ``uid``. ``data``: a Spark DataFrame, a pandas DataFrame or rows;
        columns (key, value), for a map (key, user_key, value); a list state gets one element
        per row, in order."""
        if kind not in STATE_KINDS:
            msg = f"with_keyed_state kind must be one of {STATE_KINDS}, not {kind!r}"
            raise ConfigurationError(msg)
        op = self._operators.setdefault(uid, _Operator(uid, name or uid))
        if state_name in op.tables:
            msg = f"state {state_name!r} of operator uid {uid!r} was already added to this state writer"
            raise ConfigurationError(msg)
        width = 3 if kind == "map" else 2
        table: dict[Any, Any] = {}
        for row in _rows(data):
            if len(row) != width:
                cols = "(key, user_key, value)" if kind == "map" else "(key, value)"
                msg = f"state {state_name!r} of uid {uid!r}: a {kind} state needs rows {cols}; got {len(row)} columns: {row!r:.200}"
                raise ConfigurationError(msg)
            key = state_key(_plain(row[0]))
            if kind == "map":
                table.setdefault(key, {})[_plain(row[1])] = _plain(row[2])
            elif kind == "list":
                table.setdefault(key, []).append(_plain(row[1]))
            else:
                table[key] = _plain(row[1])
        op.tables[state_name] = table
        op.kinds[state_name] = kind
        return self

    def write(self, path: str) -> str:
        """Write the savepoint into directory ``path`` (created; it must not exist yet, or be an
        existing directory to create ``savepoint-<id>-<hex>`` in when it ends with '/')."""
        job_id = new_job_id()
        if str(path).endswith("/"):
            target, dirname = str(path), savepoint_dir_name(job_id)
        else:
            target, dirname = split_uri(str(path))
        operators = []
        for op in self._operators.values():
            parts = []
            for p in range(self.parallelism):
                kgr = key_group_range_for_operator(self.max_parallelism, self.parallelism, p)
                tables = {
                    name: {k: v for k, v in t.items() if kgr.start <= assign_to_key_group(k, self.max_parallelism) <= kgr.end}
                    for name, t in op.tables.items()
                }
                parts.append(PartState(p, kgr.start, kgr.end, tables, dict(op.kinds), declared=True))
            operators.append(OperatorSnapshot(op.uid, op.name, self.parallelism, self.max_parallelism, parts))
        return write_savepoint(
            target, job_id=job_id, job_name=self.job_name, checkpoint_id=0, epoch=0, backend="canonical",
            operators=operators, directory_name=dirname,
        )


def state_writer(max_parallelism: int = 128, parallelism: int = 1) -> StateWriter:
    """A savepoint builder for bootstrapping state: the max parallelism must be the job's."""
    return StateWriter(max_parallelism, parallelism)


def _rows(data: Any) -> list[tuple]:
    if hasattr(data, "toLocalIterator") and hasattr(data, "schema"):  # a Spark DataFrame

        return dataframe_rows(data)
    if hasattr(data, "itertuples"):  # pandas
        return [tuple(r) for r in data.itertuples(index=False, name=None)]
    if isinstance(data, dict):
        return list(data.items())
    return [tuple(r) for r in data]


def _plain(value: Any) -> Any:
    """numpy scalars (from pandas) as Python values, so keys hash to the job's key groups."""
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy":
        return item()
    return value
