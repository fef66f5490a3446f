"""``flowpoint state JOB UID NAME [--key K]``: a running job's keyed state as of its latest
completed checkpoint, read in this process (no Spark), the checkpoint pinned while it is read
(flowpoint/driver/live_reads.py). For a DataFrame of it: ``flowpoint.state_reader(spark, job=...)``."""

from __future__ import annotations

import ast
import sys
from typing import Any, TextIO

from flowpoint.checkpoint.savepoint import load_operator_state, open_for_reading
from flowpoint.control.commands import local_time
from flowpoint.driver.live_reads import pin_latest, running_job_checkpoints
from flowpoint.errors import CheckpointError
from flowpoint.state.key_identity import keyed_state_maps

MISSING = object()


def parse_key(text: str) -> Any:
    """A key as a Python literal (``42``, ``'a'``, ``('a', 1)``), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def state_command(job: str, uid: str, name: str, key: str | None = None, limit: int = 20,
                  options: dict | None = None, out: TextIO = sys.stdout) -> int:
    job_dir = running_job_checkpoints(job)
    pin, chk = pin_latest(job_dir, options)
    with pin:
        access, meta = open_for_reading(chk, options, None, "the checkpoint directory of the job being read", "flowpoint state")
        states = keyed_state_maps(load_operator_state(access, meta, uid))
    if name not in states:
        msg = f"operator uid {uid!r} of job {meta.job_id} has no keyed state {name!r} in checkpoint {meta.checkpoint_id}; it has {sorted(states)}"
        raise CheckpointError(msg)
    table = states[name]
    print(f"Job {meta.job_id} ({meta.job_name!r}), checkpoint {meta.checkpoint_id} completed {local_time(meta.completed_time_ms)}: "
          f"operator {uid!r}, state {name!r}, {len(table):,} keys", file=out)
    if key is not None:
        wanted = parse_key(key)
        value = table.get(wanted, MISSING)
        if value is MISSING:
            print(f"no value for key {wanted!r}", file=out)
            return 1
        print(f"{wanted!r}\t{value!r}", file=out)
        return 0
    for i, (k, v) in enumerate(table.items()):
        if i >= limit:
            print(f"(the first {limit:,} of {len(table):,} keys; --limit N shows more, --key K one)", file=out)
            break
        print(f"{k!r}\t{v!r}", file=out)
    return 0
