"""A record that cannot be pickled (a socket in a record) fails the job once, with a
SerializationError naming the operator, its uid and the record's type and repr: no restart can
get past it (docs/errors.md), so it never restarts, whatever the restart strategy."""

from __future__ import annotations

import os
import socket

import pytest

from flowpoint import CollectSink, DataGeneratorSource, MapFunction, RestartStrategies
from flowpoint.errors import SerializationError


class AttachesASocket(MapFunction):
    def __init__(self, opens: str):
        self.opens = opens

    def open(self, runtime_context):
        with open(self.opens, "a") as f:
            f.write("x")

    def map(self, value):
        return (value % 3, socket.socket() if value == 37 else None)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["continuous", "epoch"])
@pytest.mark.parametrize("where", ["exchange", "sink"])
def test_a_socket_in_a_record_fails_the_job_once_naming_operator_and_record(make_env, tmp_path, runtime, where):
    opens = str(tmp_path / "opens")
    env = make_env(parallelism=1, max_records=50, state_checkpoints_dir=str(tmp_path / "ck"), execution_runtime=runtime)
    env.enable_checkpointing(50)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1_000, 10))  # restarts would go on and on
    s = env.from_source(DataGeneratorSource(lambda i: i, count=100), source_name="numbers").uid("numbers") \
        .map(AttachesASocket(opens)).name("attach").uid("attach-uid")
    if where == "exchange":
        s = s.key_by(lambda r: r[0]).map(lambda r: r[0]).name("after").uid("after-uid")
    s.sink_to(CollectSink()).name("collect").uid("collect-uid")
    with pytest.raises(SerializationError) as info:
        env.execute("a socket in a record")
    msg = str(info.value)
    assert "record of type tuple: (1, <socket.socket" in msg and "cannot pickle 'socket' object" in msg, msg
    if where == "exchange":
        assert "operator 'attach' (uid 'attach-uid') emitted" in msg and "operator 'after' (uid 'after-uid')" in msg
    else:
        assert "sink 'collect' (uid 'collect-uid') received" in msg
    assert os.path.getsize(opens) == 1  # one attempt: no restart
