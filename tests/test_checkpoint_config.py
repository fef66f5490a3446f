"""Checkpoint, state backend, storage and restart configuration: the API, the Flink config keys,
flowpoint.yaml, their precedence, and the restart decisions. Pure Python: no Spark."""

from __future__ import annotations

import datetime
import logging
import os
import random
import sys

import pytest

import flowpoint.api.cli_context as cli_context
from flowpoint import (
    CheckpointingMode,
    Configuration,
    ConfigurationError,
    Duration,
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
    FileSystemCheckpointStorage,
    FlowpointError,
    HashMapStateBackend,
    JobManagerCheckpointStorage,
    RestartStrategies,
    StreamExecutionEnvironment,
)
from flowpoint.api.checkpointing import resolve_checkpoint_settings
from flowpoint.api.config import format_duration, parse_bool, parse_duration
from flowpoint.api.config_file import load_config_file
from flowpoint.api.restart import (
    ExponentialDelayBackoff,
    FailureRateBackoff,
    FixedDelayBackoff,
    NoRestartBackoff,
    resolve_restart_backoff,
)


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No configuration file, -D setting or --conf leaks in from the machine or other tests."""
    monkeypatch.delenv("FLOWPOINT_CONF_DIR", raising=False)
    monkeypatch.setattr(sys, "argv", ["not-a-job"])
    monkeypatch.setattr(cli_context, "_current", cli_context.CliContext())
    monkeypatch.chdir(tmp_path)


def new_env(config: dict | None = None) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment(config)


def write(path, text: str) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return str(path)


# -- defaults ------------------------------------------------------------------------------------


def test_defaults_are_flinks():
    env = new_env()
    cfg = env.get_checkpoint_config()
    assert not cfg.is_checkpointing_enabled()
    assert cfg.get_checkpoint_interval() == env.get_checkpoint_interval() == -1
    s = resolve_checkpoint_settings(env)
    assert s.enabled is False and s.interval_ms == -1
    assert s.mode == "EXACTLY_ONCE"
    assert s.timeout_ms == 600_000
    assert s.min_pause_ms == 0
    assert s.tolerable_failures == 0
    assert s.retention == "NO_EXTERNALIZED_CHECKPOINTS"
    assert s.storage == "jobmanager" and s.checkpoints_dir is None and s.savepoints_dir is None
    assert s.num_retained == 1
    assert s.backend == "hashmap" and s.incremental is False
    assert cfg.get_max_concurrent_checkpoints() == 1
    assert cfg.get_externalized_checkpoint_retention() is ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
    assert not cfg.is_externalized_checkpoints_enabled()
    assert env.get_state_backend() == HashMapStateBackend()
    assert cfg.get_checkpoint_storage() == JobManagerCheckpointStorage()


def test_enable_checkpointing_defaults_to_exactly_once_and_takes_a_mode():
    env = new_env()
    env.enable_checkpointing(60000)
    assert env.get_checkpoint_config().is_checkpointing_enabled()
    assert env.get_checkpoint_interval() == 60000
    assert env.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE
    env.enable_checkpointing(5000, CheckpointingMode.AT_LEAST_ONCE)
    s = resolve_checkpoint_settings(env)
    assert (s.enabled, s.interval_ms, s.mode) == (True, 5000, "AT_LEAST_ONCE")


# -- each setter and its config key --------------------------------------------------------------

SETTERS = [
    # (setter, argument, key, key value, what the getter returns)
    ("set_checkpoint_interval", 30000, "execution.checkpointing.interval", "30 s", ("get_checkpoint_interval", 30000)),
    ("set_checkpointing_mode", CheckpointingMode.AT_LEAST_ONCE, "execution.checkpointing.mode", "at_least_once", ("get_checkpointing_mode", CheckpointingMode.AT_LEAST_ONCE)),
    ("set_checkpoint_timeout", 120000, "execution.checkpointing.timeout", "2 min", ("get_checkpoint_timeout", 120000)),
    ("set_min_pause_between_checkpoints", 500, "execution.checkpointing.min-pause", "500 ms", ("get_min_pause_between_checkpoints", 500)),
    ("set_max_concurrent_checkpoints", 1, "execution.checkpointing.max-concurrent-checkpoints", "1", ("get_max_concurrent_checkpoints", 1)),
    ("set_tolerable_checkpoint_failure_number", 3, "execution.checkpointing.tolerable-failed-checkpoints", "3", ("get_tolerable_checkpoint_failure_number", 3)),
    ("set_externalized_checkpoint_retention", ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION, "execution.checkpointing.externalized-checkpoint-retention", "retain_on_cancellation", ("get_externalized_checkpoint_retention", ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)),
    ("set_externalized_checkpoint_cleanup", ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION, "execution.checkpointing.externalized-checkpoint-retention", "DELETE_ON_CANCELLATION", ("get_externalized_checkpoint_cleanup", ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION)),
    ("enable_unaligned_checkpoints", True, "execution.checkpointing.unaligned", "true", ("is_unaligned_checkpoints_enabled", True)),
    ("set_checkpoint_storage_dir", "file:///data/ck", "state.checkpoints.dir", "file:///data/ck", ("get_checkpoint_storage", FileSystemCheckpointStorage("file:///data/ck"))),
]


@pytest.mark.parametrize(("setter", "argument", "key", "key_value", "expected"), SETTERS, ids=[s[0] for s in SETTERS])
def test_setter_and_config_key_mean_the_same(setter, argument, key, key_value, expected):
    getter, value = expected
    by_code = new_env()
    getattr(by_code.get_checkpoint_config(), setter)(argument)
    by_key = new_env({key: key_value})
    assert getattr(by_code.get_checkpoint_config(), getter)() == value
    assert getattr(by_key.get_checkpoint_config(), getter)() == value
    assert by_code.get_configuration().get(key) == by_key.get_configuration().get(key)
    assert resolve_checkpoint_settings(by_code) == resolve_checkpoint_settings(by_key)


def test_cleanup_and_retention_are_one_enum_and_old_names_work():
    assert ExternalizedCheckpointCleanup is ExternalizedCheckpointRetention
    cfg = new_env().get_checkpoint_config()
    cfg.enable_externalized_checkpoints(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    assert cfg.is_externalized_checkpoints_enabled()
    assert cfg.get_externalized_checkpoint_cleanup() is ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    cfg.set_fail_on_checkpointing_errors(False)
    assert cfg.get_tolerable_checkpoint_failure_number() == 2_147_483_647
    assert not cfg.is_fail_on_checkpointing_errors()


def test_one_checkpoint_config_per_environment():
    env = new_env()
    assert env.get_checkpoint_config() is env.get_checkpoint_config()
    assert new_env().get_checkpoint_config() is not env.get_checkpoint_config()


def test_max_concurrent_checkpoints_is_refused_outside_its_range_with_the_reason():
    """1 to 64 (the continuous runtime flies that many barriers; epochs take one at a time)."""
    cfg = new_env().get_checkpoint_config()
    for n in (0, -1, 65):
        with pytest.raises(ConfigurationError) as info:
            cfg.set_max_concurrent_checkpoints(n)
        msg = str(info.value)
        assert "set_max_concurrent_checkpoints" in msg and "execution.checkpointing.max-concurrent-checkpoints" in msg
    cfg.set_max_concurrent_checkpoints(3)
    assert cfg.get_max_concurrent_checkpoints() == 3
    with pytest.raises(ConfigurationError):
        new_env({"execution.checkpointing.max-concurrent-checkpoints": 0})


def test_unaligned_checkpoints_and_the_alignment_timeout_reach_the_settings():
    from flowpoint import Duration

    env = new_env()
    env.enable_checkpointing(1000)
    config = env.get_checkpoint_config()
    assert not resolve_checkpoint_settings(env).unaligned
    config.enable_unaligned_checkpoints()
    config.set_alignment_timeout(Duration.of_seconds(2))
    settings = resolve_checkpoint_settings(env)
    assert settings.unaligned and settings.aligned_timeout_ms == 2000
    assert config.is_unaligned_checkpoints_enabled() and config.get_alignment_timeout().milliseconds == 2000
    config.disable_unaligned_checkpoints()
    assert not config.is_unaligned_checkpoints_enabled() and not resolve_checkpoint_settings(env).unaligned
    # Flink's key names, from a config dict as from flowpoint.yaml or -D
    env = new_env({
        "execution.checkpointing.interval": 1000, "execution.checkpointing.unaligned.enabled": "true",
        "execution.checkpointing.aligned-checkpoint-timeout": "30 s",
    })
    settings = resolve_checkpoint_settings(env)
    assert settings.unaligned and settings.aligned_timeout_ms == 30_000
    with pytest.raises(ConfigurationError, match="aligned-checkpoint-timeout"):
        config.set_alignment_timeout(-1)


def test_bad_setter_values_name_the_setter_key_and_allowed_values():
    cfg = new_env().get_checkpoint_config()
    cases = [
        (lambda: cfg.set_checkpoint_interval(0), "set_checkpoint_interval", "execution.checkpointing.interval", "at least 1 ms"),
        (lambda: cfg.set_checkpoint_timeout(5), "set_checkpoint_timeout", "execution.checkpointing.timeout", "at least 10 ms"),
        (lambda: cfg.set_checkpoint_interval("often"), "set_checkpoint_interval", "execution.checkpointing.interval", "'1 min'"),
        (lambda: cfg.set_checkpoint_timeout(-1), "set_checkpoint_timeout", "execution.checkpointing.timeout", "duration"),
        (lambda: cfg.set_min_pause_between_checkpoints(-1), "set_min_pause_between_checkpoints", "execution.checkpointing.min-pause", "at least 0 ms"),
        (lambda: cfg.set_tolerable_checkpoint_failure_number(-1), "set_tolerable_checkpoint_failure_number", "tolerable-failed-checkpoints", ">= 0"),
        (lambda: cfg.set_checkpointing_mode("twice"), "set_checkpointing_mode", "execution.checkpointing.mode", "EXACTLY_ONCE | AT_LEAST_ONCE"),
        (lambda: cfg.set_externalized_checkpoint_retention("keep"), "set_externalized_checkpoint_retention", "externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION | DELETE_ON_CANCELLATION | NO_EXTERNALIZED_CHECKPOINTS"),
        (lambda: cfg.enable_unaligned_checkpoints("maybe"), "enable_unaligned_checkpoints", "execution.checkpointing.unaligned", "true or false"),
        (lambda: cfg.set_checkpoint_storage(42), "set_checkpoint_storage", "state.checkpoints.dir", "directory URI"),
    ]
    for call, setter, key, allowed in cases:
        with pytest.raises(ConfigurationError) as info:
            call()
        msg = str(info.value)
        assert setter in msg and key in msg and allowed in msg, msg
        assert isinstance(info.value, FlowpointError)


# -- state backends and storage ------------------------------------------------------------------


def test_state_backends_set_their_keys():
    env = new_env()
    env.set_state_backend(EmbeddedRocksDBStateBackend(True))
    assert env.get_configuration().get("state.backend.type") == "rocksdb"
    assert env.get_configuration().get("state.backend.incremental") is True
    assert env.get_state_backend() == EmbeddedRocksDBStateBackend(True)
    assert env.get_state_backend().is_incremental_checkpoints_enabled()
    s = resolve_checkpoint_settings(env)
    assert (s.backend, s.incremental) == ("rocksdb", True)
    env.set_state_backend(HashMapStateBackend())
    assert resolve_checkpoint_settings(env).backend == "hashmap"
    assert env.get_state_backend() == HashMapStateBackend()


def test_rocksdb_without_an_argument_leaves_incremental_to_the_configuration():
    env = new_env({"state.backend.incremental": "true"})
    env.set_state_backend(EmbeddedRocksDBStateBackend())
    assert resolve_checkpoint_settings(env).incremental is True
    env = new_env({"state.backend.type": "ROCKSDB"})
    s = resolve_checkpoint_settings(env)
    assert (s.backend, s.incremental) == ("rocksdb", False)


def test_bad_state_backends_are_refused():
    with pytest.raises(ConfigurationError, match="set_state_backend.*HashMapStateBackend"):
        new_env().set_state_backend("rocksdb")
    with pytest.raises(ConfigurationError, match="True, False or None"):
        EmbeddedRocksDBStateBackend("yes")
    with pytest.raises(ConfigurationError, match="'state.backend.type' must be one of hashmap | rocksdb"):
        new_env({"state.backend.type": "memory"})


def test_checkpoint_storage_from_a_uri_an_object_or_a_local_path(tmp_path):
    env = new_env()
    cfg = env.get_checkpoint_config()
    cfg.set_checkpoint_storage("hdfs://namenode:8020/flink/ck")
    s = resolve_checkpoint_settings(env)
    assert (s.storage, s.checkpoints_dir) == ("filesystem", "hdfs://namenode:8020/flink/ck")
    cfg.set_checkpoint_storage(FileSystemCheckpointStorage("s3://bucket/ck"))
    assert resolve_checkpoint_settings(env).checkpoints_dir == "s3://bucket/ck"
    cfg.set_checkpoint_storage(str(tmp_path / "local" / "ck"))
    assert resolve_checkpoint_settings(env).checkpoints_dir == f"file://{tmp_path}/local/ck"
    # a relative path would depend on where the driver starts (issue 17, case 8): refused
    with pytest.raises(ConfigurationError, match=r"'state.checkpoints.dir' must be an absolute path or a URI with a scheme.*got 'relative/ck'"):
        cfg.set_checkpoint_storage("relative/ck")
    cfg.set_checkpoint_storage(JobManagerCheckpointStorage())
    s = resolve_checkpoint_settings(env)
    assert s.storage == "jobmanager"
    assert cfg.get_checkpoint_storage() == JobManagerCheckpointStorage(f"file://{tmp_path}/local/ck")


def test_storage_defaults_to_filesystem_when_a_directory_is_set():
    assert resolve_checkpoint_settings(new_env({"state.checkpoints.dir": "/data/ck"})).storage == "filesystem"
    s = resolve_checkpoint_settings(new_env({"state.checkpoints.dir": "/data/ck", "state.checkpoint-storage": "jobmanager"}))
    assert (s.storage, s.checkpoints_dir) == ("jobmanager", "file:///data/ck")


def test_filesystem_storage_without_a_directory_is_an_error_naming_the_keys():
    env = new_env({"state.checkpoint-storage": "filesystem"})
    with pytest.raises(ConfigurationError) as info:
        resolve_checkpoint_settings(env)
    assert "state.checkpoint-storage" in str(info.value) and "state.checkpoints.dir" in str(info.value)
    with pytest.raises(ConfigurationError, match="checkpoint_path"):
        FileSystemCheckpointStorage(None)


def test_flink2_key_names_are_aliases():
    env = new_env({
        "execution.checkpointing.dir": "file:///ck",
        "execution.checkpointing.savepoint-dir": "file:///sp",
        "execution.checkpointing.num-retained": 5,
        "execution.checkpointing.incremental": "true",
        "execution.checkpointing.storage": "filesystem",
        "state.backend": "rocksdb",
    })
    s = resolve_checkpoint_settings(env)
    assert (s.checkpoints_dir, s.savepoints_dir, s.num_retained) == ("file:///ck", "file:///sp", 5)
    assert (s.storage, s.backend, s.incremental) == ("filesystem", "rocksdb", True)
    assert env.get_configuration().get("state.checkpoints.dir") == env.get_configuration().get("execution.checkpointing.dir")


def test_num_retained_must_be_at_least_one():
    with pytest.raises(ConfigurationError, match="state.checkpoints.num-retained.*>= 1"):
        new_env({"state.checkpoints.num-retained": 0})


def test_savepoint_directory_setter():
    env = new_env()
    env.set_default_savepoint_directory("/data/savepoints")
    assert env.get_default_savepoint_directory() == "file:///data/savepoints"
    assert resolve_checkpoint_settings(env).savepoints_dir == "file:///data/savepoints"


def test_retention_with_jobmanager_storage_warns(caplog):
    env = new_env()
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    with caplog.at_level(logging.WARNING, logger="flowpoint"):
        resolve_checkpoint_settings(env)
    assert any("RETAIN_ON_CANCELLATION has no effect with jobmanager" in r.getMessage() for r in caplog.records)


# -- durations and booleans ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("60 s", 60000), ("1 min", 60000), ("500 ms", 500), ("60000", 60000), (60000, 60000),
        ("10s", 10000), ("2 h", 7_200_000), ("1 d", 86_400_000), ("3 minutes", 180000),
        ("1 m", 60000), ("5 SECONDS", 5000), ("1500 us", 1), ("999999 ns", 0), (" 7 sec ", 7000),
        (datetime.timedelta(seconds=2), 2000), (Duration.of_seconds(3), 3000),
    ],
)
def test_durations(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "1.5 s", "-1 s", "ten s", "10 fortnights", "s", True, 1.5, None])
def test_invalid_durations(text):
    with pytest.raises(ValueError, match="a bare number is milliseconds"):
        parse_duration(text)


def test_format_duration_round_trips():
    for ms in (0, 1, 999, 1000, 1500, 60000, 90000, 3_600_000, 86_400_000):
        assert parse_duration(format_duration(ms)) == ms
    assert format_duration(10000) == "10 s" and format_duration(60000) == "1 min" and format_duration(1500) == "1500 ms"


def test_booleans():
    assert parse_bool("true") is True and parse_bool("FALSE") is False and parse_bool(True) is True
    for bad in ("yes", "1", 1, "on", None):
        with pytest.raises(ValueError, match="true or false"):
            parse_bool(bad)


def test_configuration_checks_typed_keys_and_keeps_unknown_ones():
    conf = Configuration({"execution.checkpointing.timeout": "1 min", "my.job.param": "x", "parallelism.default": "4"})
    assert conf.get("execution.checkpointing.timeout") == 60000
    assert conf.get("my.job.param") == "x" and conf.get("parallelism.default") == 4
    assert conf.copy().to_dict() == conf.to_dict()
    with pytest.raises(ConfigurationError, match="'parallelism.default' must be an integer >= 1; got 'many'"):
        conf.set("parallelism.default", "many")
    with pytest.raises(ConfigurationError, match=r"'state.backend' \(another name of 'state.backend.type'\) must be one of"):
        conf.set("state.backend", "memory")


# -- flowpoint.yaml --------------------------------------------------------------------------------


def test_yaml_flat_and_nested_keys(tmp_path):
    path = write(tmp_path / "conf" / "flowpoint.yaml", """
state:
  backend:
    type: rocksdb
    incremental: true
  checkpoints.dir: hdfs:///checkpoints/
execution.checkpointing:
  interval: 1 min
  externalized-checkpoint-retention: RETAIN_ON_CANCELLATION
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay:
  attempts: 3
  delay: 10 s
my.job:
  threshold: 5
""")
    settings = load_config_file(None, path)
    assert settings == {
        "state.backend.type": "rocksdb",
        "state.backend.incremental": True,
        "state.checkpoints.dir": "hdfs:///checkpoints/",
        "execution.checkpointing.interval": "1 min",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "10 s",
        "my.job.threshold": 5,
    }


def test_yaml_is_read_by_get_execution_environment(tmp_path, monkeypatch):
    write(tmp_path / "conf" / "flowpoint.yaml", "state.backend.type: rocksdb\nexecution.checkpointing.interval: 30 s\nstate.checkpoints.num-retained: 20\n")
    monkeypatch.setenv("FLOWPOINT_CONF_DIR", str(tmp_path / "conf"))
    env = new_env()
    s = resolve_checkpoint_settings(env)
    assert (s.backend, s.interval_ms, s.num_retained, s.enabled) == ("rocksdb", 30000, 20, True)
    assert isinstance(resolve_restart_backoff(env, s.enabled), ExponentialDelayBackoff)


def test_yaml_search_order(tmp_path, monkeypatch):
    job = write(tmp_path / "jobs" / "job.py", "")
    write(tmp_path / "jobs" / "flowpoint.yaml", "pipeline.name: next-to-job\n")
    write(tmp_path / "envdir" / "flowpoint.yaml", "pipeline.name: from-env-var\n")
    conf_file = write(tmp_path / "explicit" / "custom.yaml", "pipeline.name: from-conf-file\n")
    write(tmp_path / "explicit" / "flowpoint.yaml", "pipeline.name: from-conf-dir\n")

    assert load_config_file(None, None) == {}
    assert load_config_file(job, None) == {"pipeline.name": "next-to-job"}
    monkeypatch.setenv("FLOWPOINT_CONF_DIR", str(tmp_path / "envdir"))
    assert load_config_file(job, None) == {"pipeline.name": "from-env-var"}
    assert load_config_file(job, conf_file) == {"pipeline.name": "from-conf-file"}
    assert load_config_file(job, str(tmp_path / "explicit")) == {"pipeline.name": "from-conf-dir"}

    # the environment finds the job from sys.argv[0] and --conf from the CLI's context
    monkeypatch.delenv("FLOWPOINT_CONF_DIR")
    monkeypatch.setattr(sys, "argv", [job, "--arg"])
    assert new_env()._default_job_name() == "next-to-job"
    with cli_context.cli_context(cli_context.CliContext(conf_path=conf_file)):
        assert new_env()._default_job_name() == "from-conf-file"
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "jobs" / "job.txt")])
    assert new_env()._default_job_name() == "Flowpoint Streaming Job"


def test_missing_explicit_configuration_is_an_error(tmp_path, monkeypatch):
    with pytest.raises(ConfigurationError, match="nowhere.yaml.*--conf.*not found"):
        load_config_file(None, str(tmp_path / "nowhere.yaml"))
    with pytest.raises(ConfigurationError, match="--conf"):
        load_config_file(None, str(tmp_path))  # a folder without flowpoint.yaml
    monkeypatch.setenv("FLOWPOINT_CONF_DIR", str(tmp_path / "empty"))
    with pytest.raises(ConfigurationError, match="FLOWPOINT_CONF_DIR.*empty.*no flowpoint.yaml"):
        load_config_file(None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("state.backend.type: [unclosed\n", ["is not valid YAML", "line 1"]),
        ("- a\n- b\n", ["must be a mapping", "list"]),
        ("execution.checkpointing.interval: often\n", ["'execution.checkpointing.interval'", "duration", "'often'"]),
        ("state:\n  checkpoints:\n    num-retained: many\n", ["'state.checkpoints.num-retained'", "integer >= 1"]),
        ("state.backend.incremental: yes\n", ["'state.backend.incremental'", "true or false", "'yes'"]),
        ("restart-strategy.exponential-delay.jitter-factor: 2\n", ["jitter-factor", "<= 1.0"]),
        ("restart-strategy.type: sometimes\n", ["'restart-strategy.type'", "none | fixed-delay | failure-rate | exponential-delay"]),
        ("a: 1\na: 2\n", ["duplicate key 'a'", "line 2"]),
        ("state.backend.type: hashmap\nstate:\n  backend:\n    type: rocksdb\n", ["'state.backend.type' twice"]),
        ("state.checkpoints.dir: /a\nexecution.checkpointing.dir: /b\n", ["both 'state.checkpoints.dir' and 'execution.checkpointing.dir'"]),
    ],
)
def test_bad_yaml_errors_name_the_file_and_key(tmp_path, text, expected):
    path = write(tmp_path / "conf" / "flowpoint.yaml", text)
    with pytest.raises(ConfigurationError) as info:
        load_config_file(None, path)
    msg = str(info.value)
    assert path in msg
    for part in expected:
        assert part in msg, msg


def test_yaml_booleans_are_yaml_1_2_so_off_is_a_string(tmp_path):
    path = write(tmp_path / "c" / "flowpoint.yaml", "restart-strategy: off\nstate.backend.incremental: True\nempty.key:\n")
    assert load_config_file(None, path) == {"restart-strategy": "off", "state.backend.incremental": True}
    assert load_config_file(None, write(tmp_path / "d" / "flowpoint.yaml", "")) == {}


def test_misspelt_yaml_keys_are_warned_about(tmp_path, caplog):
    path = write(tmp_path / "c" / "flowpoint.yaml", "state.checkpoint.dir: /data\nmy.own.key: 1\n")
    with caplog.at_level(logging.WARNING, logger="flowpoint"):
        load_config_file(None, path)
    messages = [r.getMessage() for r in caplog.records]
    assert any("'state.checkpoint.dir'" in m and "did you mean 'state.checkpoints.dir'" in m for m in messages)
    assert not any("my.own.key" in m for m in messages)


# -- precedence: code > config dict > -D > flowpoint.yaml > defaults ------------------------------


def test_precedence(tmp_path, monkeypatch):
    write(tmp_path / "conf" / "flowpoint.yaml", """
execution.checkpointing.timeout: 1 min
execution.checkpointing.min-pause: 1 s
execution.checkpointing.tolerable-failed-checkpoints: 1
execution.checkpointing.interval: 10 s
execution.checkpointing.dir: file:///from-yaml
restart-strategy.type: failure-rate
""")
    monkeypatch.setenv("FLOWPOINT_CONF_DIR", str(tmp_path / "conf"))
    monkeypatch.setattr(cli_context, "_current", cli_context.CliContext(defaults={
        "execution.checkpointing.min-pause": "2 s",
        "execution.checkpointing.tolerable-failed-checkpoints": "2",
        "execution.checkpointing.interval": "20 s",
        "state.checkpoints.dir": "file:///from-cli",
    }))
    env = new_env({"execution.checkpointing.tolerable-failed-checkpoints": 3, "execution.checkpointing.interval": "30 s"})
    env.enable_checkpointing(40000)
    s = resolve_checkpoint_settings(env)
    assert s.timeout_ms == 60000  # yaml
    assert s.min_pause_ms == 2000  # -D over yaml
    assert s.checkpoints_dir == "file:///from-cli"  # -D over yaml, under either key name
    assert s.tolerable_failures == 3  # dict over -D
    assert s.interval_ms == 40000  # code over everything
    assert isinstance(resolve_restart_backoff(env, True), FailureRateBackoff)  # yaml
    env.set_restart_strategy(RestartStrategies.no_restart())
    assert isinstance(resolve_restart_backoff(env, True), NoRestartBackoff)  # code
    env.set_restart_strategy(RestartStrategies.fall_back_restart())
    assert isinstance(resolve_restart_backoff(env, True), FailureRateBackoff)  # the configuration again


def test_bad_cli_values_fail_when_the_environment_is_created():
    with cli_context.cli_context(cli_context.CliContext(defaults={"execution.checkpointing.interval": "soon"})):
        with pytest.raises(ConfigurationError, match="execution.checkpointing.interval"):
            new_env()


# -- restart strategies: configuration ------------------------------------------------------------


def test_default_restart_strategy_depends_on_checkpointing():
    env = new_env()
    assert isinstance(resolve_restart_backoff(env, False), NoRestartBackoff)
    backoff = resolve_restart_backoff(env, True)
    assert isinstance(backoff, ExponentialDelayBackoff)
    assert (backoff.initial_backoff_ms, backoff.max_backoff_ms, backoff.multiplier) == (1000, 60000, 1.5)
    assert (backoff.reset_threshold_ms, backoff.jitter, backoff.attempts) == (3_600_000, 0.1, None)
    assert env.get_restart_strategy() == RestartStrategies.fall_back_restart()


def test_restart_strategies_from_keys():
    fixed = new_env({"restart-strategy": "fixeddelay", "restart-strategy.fixed-delay.attempts": "3", "restart-strategy.fixed-delay.delay": "10 s"})
    assert fixed.get_restart_strategy() == RestartStrategies.fixed_delay_restart(3, 10000)
    assert resolve_restart_backoff(fixed, False).describe() == "fixed-delay (3 attempts, 10 s)"
    assert resolve_restart_backoff(new_env({"restart-strategy.type": "fixed-delay"}), False).describe() == "fixed-delay (1 attempt, 1 s)"

    rate = new_env({"restart-strategy.type": "failure-rate", "restart-strategy.failure-rate.max-failures-per-interval": 3, "restart-strategy.failure-rate.failure-rate-interval": "5 min", "restart-strategy.failure-rate.delay": "10 s"})
    backoff = resolve_restart_backoff(rate, True)
    assert (backoff.max_failures, backoff.interval_ms, backoff.delay_ms) == (3, 300_000, 10_000)
    assert "failure-rate" in backoff.describe() and "5 min" in backoff.describe()

    exp = new_env({
        "restart-strategy.type": "exponentialdelay",
        "restart-strategy.exponential-delay.initial-backoff": "2 s",
        "restart-strategy.exponential-delay.max-backoff": "30 s",
        "restart-strategy.exponential-delay.backoff-multiplier": "2",
        "restart-strategy.exponential-delay.reset-backoff-threshold": "10 min",
        "restart-strategy.exponential-delay.jitter-factor": 0,
        "restart-strategy.exponential-delay.attempts-before-reset-backoff": 4,
    })
    backoff = resolve_restart_backoff(exp, False)
    assert (backoff.initial_backoff_ms, backoff.max_backoff_ms, backoff.multiplier, backoff.reset_threshold_ms, backoff.jitter, backoff.attempts) == (2000, 30000, 2.0, 600_000, 0.0, 4)

    for name in ("none", "off", "disable", "NONE"):
        assert isinstance(resolve_restart_backoff(new_env({"restart-strategy.type": name}), True), NoRestartBackoff)


def test_code_restart_strategy_overrides_keys_and_is_returned():
    env = new_env({"restart-strategy.type": "none"})
    strategy = RestartStrategies.fixed_delay_restart(restart_attempts=3, delay_between_attempts=datetime.timedelta(seconds=10))
    env.get_config().set_restart_strategy(strategy)
    assert env.get_restart_strategy() is strategy and env.get_config().get_restart_strategy() is strategy
    assert strategy.get_restart_attempts() == 3
    assert strategy.get_delay_between_attempts_interval() == datetime.timedelta(seconds=10)
    assert isinstance(resolve_restart_backoff(env, False), FixedDelayBackoff)
    rate = RestartStrategies.failure_rate_restart(2, "1 min", 500)
    assert (rate.get_max_failure_rate(), rate.get_failure_interval(), rate.get_delay_between_attempts_interval()) == (2, datetime.timedelta(minutes=1), datetime.timedelta(milliseconds=500))
    exp = RestartStrategies.exponential_delay_restart(100, 1000, 2.0, 5000, 0.0)
    assert exp.get_max_backoff() == datetime.timedelta(seconds=1) and exp.get_attempts_before_reset_backoff() is None
    assert "exponential-delay" in exp.get_description()


def test_bad_restart_strategies_name_the_parameter_and_key():
    cases = [
        (lambda: RestartStrategies.fixed_delay_restart(-1, 1000), ["restart_attempts", "restart-strategy.fixed-delay.attempts", ">= 0"]),
        (lambda: RestartStrategies.fixed_delay_restart(3, "soon"), ["delay_between_attempts", "restart-strategy.fixed-delay.delay", "duration"]),
        (lambda: RestartStrategies.failure_rate_restart(0, 1000, 0), ["failure_rate", "max-failures-per-interval", ">= 1"]),
        (lambda: RestartStrategies.failure_rate_restart(1, 0, 0), ["failure_interval", "failure-rate-interval", "at least 1 ms"]),
        (lambda: RestartStrategies.exponential_delay_restart(5000, 1000, 2.0, 1000, 0.1), ["initial backoff", "max-backoff"]),
        (lambda: RestartStrategies.exponential_delay_restart(1000, 5000, 1.0, 1000, 0.1), ["backoff_multiplier", "> 1.0"]),
        (lambda: RestartStrategies.exponential_delay_restart(1000, 5000, 2.0, 1000, -0.5), ["jitter_factor", ">= 0.0 and <= 1.0"]),
        (lambda: RestartStrategies.exponential_delay_restart(1000, 5000, 2.0, 1000, 0.1, 0), ["attempts_before_reset_backoff", ">= 1"]),
        (lambda: RestartStrategies.fixed_delay_restart(None, 1000), ["restart_attempts", "must be set"]),
        (lambda: new_env().set_restart_strategy("fixed-delay"), ["set_restart_strategy", "RestartStrategies"]),
        (lambda: resolve_restart_backoff(new_env({"restart-strategy.type": "exponential-delay", "restart-strategy.exponential-delay.initial-backoff": "2 min"}), True), ["initial backoff (2 min", "cannot be larger than max backoff (1 min"]),
    ]
    for call, parts in cases:
        with pytest.raises(ConfigurationError) as info:
            call()
        for part in parts:
            assert part in str(info.value), str(info.value)


# -- restart strategies: decisions ------------------------------------------------------------------


def test_no_restart():
    backoff = NoRestartBackoff()
    assert backoff.on_failure(0) is None and backoff.describe().startswith("none")


def test_fixed_delay_restarts_n_times_then_fails():
    backoff = FixedDelayBackoff(3, 10000)
    backoff.on_success(5)  # no effect
    assert [backoff.on_failure(t) for t in (0, 100, 200, 300, 400)] == [10000, 10000, 10000, None, None]
    assert FixedDelayBackoff(0, 1000).on_failure(0) is None


def test_failure_rate_fails_when_more_than_max_failures_fall_in_the_interval():
    backoff = FailureRateBackoff(max_failures=2, interval_ms=1000, delay_ms=50)
    assert backoff.on_failure(0) == 50
    assert backoff.on_failure(600) == 50
    assert backoff.on_failure(1200) == 50  # 3 failures, but the first is 1200 ms before the third
    assert backoff.on_failure(1300) is None  # 600, 1200, 1300: three within 1000 ms

    backoff = FailureRateBackoff(max_failures=1, interval_ms=1000, delay_ms=0)
    assert backoff.on_failure(0) == 0
    assert backoff.on_failure(1000) is None  # exactly the interval apart counts as within it

    backoff = FailureRateBackoff(max_failures=1, interval_ms=1, delay_ms=0)
    assert all(backoff.on_failure(t) == 0 for t in range(0, 20, 2))  # Flink's many-failures-within-rate


def test_exponential_delay_grows_to_the_cap():
    backoff = ExponentialDelayBackoff(1000, 10000, 2.0, 60000, 0.0)
    now, delays = 0, []
    for _ in range(7):
        delay = backoff.on_failure(now)
        delays.append(delay)
        now += delay + 10  # the restarted job fails 10 ms after it started
    assert delays == [1000, 2000, 4000, 8000, 10000, 10000, 10000]


def test_exponential_delay_resets_after_running_the_threshold():
    backoff = ExponentialDelayBackoff(1000, 100_000, 2.0, 60000, 0.0)
    assert backoff.on_failure(0) == 1000  # restart at 1000
    assert backoff.on_failure(1000 + 59_999) == 2000  # ran just short of the threshold: grows
    restarted = 1000 + 59_999 + 2000
    assert backoff.on_failure(restarted + 60000) == 1000  # ran the threshold since its restart: reset
    assert backoff.on_failure(restarted + 60000 + 1000 + 1) == 2000


def test_exponential_delay_merges_failures_during_a_pending_restart():
    backoff = ExponentialDelayBackoff(1000, 100_000, 2.0, 60000, 0.0, attempts=1)
    assert backoff.on_failure(0) == 1000
    assert backoff.on_failure(400) == 600  # waits for the same restart, not a new attempt
    assert backoff.on_failure(1000) == 0
    assert backoff.on_failure(1001) is None  # the second attempt exceeds attempts=1


def test_exponential_delay_attempts_before_reset():
    backoff = ExponentialDelayBackoff(1000, 100_000, 2.0, 60000, 0.0, attempts=2)
    assert backoff.on_failure(0) == 1000
    assert backoff.on_failure(1001) == 2000
    assert backoff.on_failure(3002) is None
    backoff = ExponentialDelayBackoff(1000, 100_000, 2.0, 60000, 0.0, attempts=2)
    assert backoff.on_failure(0) == 1000
    assert backoff.on_failure(1001) == 2000
    assert backoff.on_failure(3001 + 60000) == 1000  # a reset gives the attempts back
    assert "2 attempts before reset" in backoff.describe()


def test_exponential_delay_jitter_stays_in_bounds_and_is_seeded():
    def run(seed: int) -> list[int]:
        backoff = ExponentialDelayBackoff(1000, 20000, 2.0, 3_600_000, 0.25, rng=random.Random(seed))
        now, out = 0, []
        for _ in range(8):
            delay = backoff.on_failure(now)
            out.append(delay)
            now += delay + 1
        return out

    for seed in range(50):
        delays = run(seed)
        for k, delay in enumerate(delays):
            base = min(1000 * 2**k, 2**62)
            low = min(max(1000, int(base * 0.75)), 20000)
            high = min(20000, base + int(base * 0.25))
            assert low <= delay <= high, (seed, k, delay)
    assert run(7) == run(7)
    assert len({tuple(run(seed)) for seed in range(10)}) > 1


def test_exponential_delay_survives_very_many_restarts():
    backoff = ExponentialDelayBackoff(1, 5000, 1.5, 10**12, 0.1, rng=random.Random(1))
    now, delays = 0, []
    for _ in range(3000):
        delays.append(backoff.on_failure(now))
        now += delays[-1] + 1
    assert all(1 <= d <= 5000 for d in delays)
    assert delays[-100:] == [5000] * 100  # far past the cap, jitter cannot bring a delay under it
