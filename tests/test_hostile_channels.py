"""Channels of a continuous run refuse peers that do not hold the run's secret (issue 18): a
connection without it, with a wrong one, with garbage or silence is dropped, and the listener
goes on serving the job's own peers."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from flowpoint.tasks.channels import ChannelError, ChannelServer, connect, new_secret


@pytest.fixture
def server():
    received = []
    done = threading.Event()

    def handler(hello, channel):
        try:
            while True:
                received.append((hello, channel.recv()))
                done.set()
        except ChannelError:
            channel.close()

    secret = new_secret()
    srv = ChannelServer("127.0.0.1", secret, handler)
    srv.secret_for_test, srv.received, srv.got = secret, received, done
    yield srv
    srv.close()


def test_a_peer_with_the_secret_sends_frames(server):
    ch = connect(server.address, server.secret_for_test, ("data", 1, 0, 0))
    ch.send(("data", [1, 2, 3]))
    assert server.got.wait(5)
    assert server.received == [(("data", 1, 0, 0), ("data", [1, 2, 3]))]
    ch.close()


def test_a_wrong_secret_is_refused_and_the_server_goes_on(server):
    with pytest.raises(ChannelError):
        connect(server.address, new_secret(), ("data", 1, 0, 0))
    good = connect(server.address, server.secret_for_test, ("data", 2, 0, 0))
    good.send("after")
    assert server.got.wait(5)
    assert server.received == [(("data", 2, 0, 0), "after")]
    assert server.refused == 1
    good.close()


def test_garbage_a_replayed_answer_and_silence_are_dropped(server):
    # garbage instead of the challenge's answer
    raw = socket.create_connection(server.address)
    raw.recv(4096)
    raw.sendall(b"\x00\x00\x00\x40" + b"x" * 64)
    # a huge frame length (a memory attack) before any authentication
    raw2 = socket.create_connection(server.address)
    raw2.recv(4096)
    raw2.sendall(b"\x7f\xff\xff\xff")
    # a peer that connects and says nothing does not hold up the others
    silent = socket.create_connection(server.address)
    time.sleep(0.3)
    good = connect(server.address, server.secret_for_test, ("data", 3, 0, 0))
    good.send("still serving")
    assert server.got.wait(5)
    assert server.received == [(("data", 3, 0, 0), "still serving")]
    deadline = time.monotonic() + 5
    while server.refused < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.refused >= 2
    for s in (raw, raw2, silent):
        s.close()
    good.close()


def test_a_listener_without_the_secret_gets_nothing(server):
    """A task never sends records to an impostor on a recycled port: the listener must prove the
    secret too."""
    impostor = socket.create_server(("127.0.0.1", 0))
    port = impostor.getsockname()[1]

    def fake():
        conn, _ = impostor.accept()
        from multiprocessing.connection import Connection

        c = Connection(conn.detach())
        c.send_bytes(b"flowpoint-channel-1" + b"n" * 32)  # a well-formed challenge
        c.recv_bytes(128)  # the client's answer
        c.send_bytes(b"z" * 32)  # but no proof of the secret

    t = threading.Thread(target=fake, daemon=True)
    t.start()
    with pytest.raises(ChannelError):
        connect(("127.0.0.1", port), new_secret(), ("data", 1, 0, 0))
    impostor.close()


def test_a_running_continuous_job_refuses_peers_without_its_secret_and_goes_on(make_env, tmp_path):
    """Every endpoint a continuous run listens on (the driver's control channel, each slot's
    record channels) refuses a wrong secret, garbage and a huge frame length; the job finishes
    with exact state and output."""
    from checkpoint_jobs import build, expected_outputs, expected_state

    events = 2_000
    env = make_env(parallelism=2, max_records=100, **{"execution.runtime": "continuous", "execution.buffer-timeout": 5})
    sink = build(env, events, rate=1_000)
    client = env.execute_async("attacked")
    deadline = time.monotonic() + 120
    while len(client.progress().endpoints) < 3 and not client.is_done() and time.monotonic() < deadline:
        time.sleep(0.05)
    endpoints = client.progress().endpoints
    assert len(endpoints) == 3, endpoints  # the driver's control channel and two slots'
    for endpoint in endpoints:
        host, port = endpoint.rsplit(":", 1)
        with pytest.raises(ChannelError):
            connect((host, int(port)), new_secret(), ("control", 0))
        raw = socket.create_connection((host, int(port)))
        raw.recv(4096)
        raw.sendall(b"\x7f\xff\xff\xff" + b"x" * 64)
        raw.close()
    assert not client.is_done(), "the job ended before the attack was over; slow it down"
    result = client.wait(120)
    state = result.get_keyed_state("counting")
    assert {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})} == expected_state(events)
    assert sorted(sink.results) == expected_outputs(events)


def test_dropped_and_refused_connections_do_not_fill_the_log(server, caplog):
    """Issue 25: a local user connecting in a loop. A peer that leaves (or resets) during the
    handshake is one debug line; refusals (garbage, a wrong secret) warn once a minute with a
    count, the rest at debug level. The server goes on serving its own peers."""
    import logging
    import struct

    with caplog.at_level(logging.DEBUG, logger="flowpoint"):
        for i in range(60):
            raw = socket.create_connection(server.address)
            if i % 2:
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            raw.close()
        for _ in range(20):
            raw = socket.create_connection(server.address)
            raw.recv(4096)
            raw.sendall(b"\x00\x00\x00\x40" + b"x" * 64)  # garbage for the challenge's answer
            raw.close()
        deadline = time.monotonic() + 10
        while server.refused < 80 and time.monotonic() < deadline:
            time.sleep(0.05)
        good = connect(server.address, server.secret_for_test, ("data", 4, 0, 0))
        good.send("still serving")
        assert server.got.wait(5)
        good.close()
    assert server.refused == 80
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "refused a channel connection" in warnings[0], warnings
    assert all(r.exc_info is None for r in caplog.records)
