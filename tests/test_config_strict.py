"""Misspelt and unknown configuration keys (issue 10, case 10): a Configuration/dict, ``-D`` and
flowpoint.yaml warn about a key close to a known one, naming it, or fail with ConfigurationError
where ``config.strict`` is on (default on for ``-D``). ``spark.*`` and filesystem keys pass
unless close to a known key of their own family. Pure Python: no Spark."""

from __future__ import annotations

import logging
import os
import re
import sys

import pytest

import flowpoint
import flowpoint.api.cli_context as cli_context
import flowpoint.api.config_file as config_file
from flowpoint import Configuration, ConfigurationError, StreamExecutionEnvironment
from flowpoint.api.config import ALIASES, OPTIONS, unknown_key_problem
from flowpoint.cli import main, script_context


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.delenv("FLOWPOINT_CONF_DIR", raising=False)
    monkeypatch.setattr(sys, "argv", ["not-a-job"])
    monkeypatch.setattr(cli_context, "_current", cli_context.CliContext())
    monkeypatch.setattr(sys, "path", list(sys.path))  # flowpoint run puts the job's folder first
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def warnings_of_flowpoint(caplog):
    caplog.set_level(logging.WARNING, logger="flowpoint")

    def messages() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    return messages


def job_file(tmp_path, ran) -> str:
    """A job script that records that it ran (so a refused -D provably stopped before it)."""
    path = tmp_path / "job.py"
    path.write_text(f"open({str(ran)!r}, 'w').close()\n")
    return str(path)


# -- a Configuration or dict -------------------------------------------------------------------


def test_a_misspelt_dict_key_is_warned_about_with_the_known_key(warnings_of_flowpoint):
    env = StreamExecutionEnvironment.get_execution_environment({"state.backend.typ": "rocksdb", "my.own.key": 1})
    messages = warnings_of_flowpoint()
    assert any("'state.backend.typ'" in m and "did you mean 'state.backend.type'" in m for m in messages), messages
    assert not any("my.own.key" in m for m in messages)  # a key of the user's own, not a typo: quiet
    assert env.get_configuration().get("my.own.key") == 1  # kept for user code, as before


def test_a_misspelt_key_set_on_a_configuration_is_warned_about(warnings_of_flowpoint):
    config = Configuration()
    config.set("execution.checkpointing.intervall", "10 s")
    assert any("did you mean 'execution.checkpointing.interval'" in m for m in warnings_of_flowpoint())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure({"restart-strategy.typ": "none"})
    assert any("did you mean 'restart-strategy.type'" in m for m in warnings_of_flowpoint())


def test_a_strict_configuration_refuses_misspelt_and_unknown_keys():
    with pytest.raises(ConfigurationError) as info:
        Configuration({"state.backend.typ": "rocksdb", "config.strict": True})  # wherever config.strict is in the dict
    assert "'state.backend.typ'" in str(info.value) and "'state.backend.type'" in str(info.value)
    assert "config.strict: false" in str(info.value)  # what to do
    with pytest.raises(ConfigurationError, match="'my.own.key': flowpoint does not read it"):
        StreamExecutionEnvironment.get_execution_environment({"config.strict": "true", "my.own.key": 1})
    strict = Configuration({"config.strict": True, "spark.executor.memory": "2g", "fs.s3a.connection.maximum": 5})
    with pytest.raises(ConfigurationError, match="did you mean 's3.endpoint'"):
        strict.set("s3.endpont", "http://x")
    assert strict.get("spark.executor.memory") == "2g"


def test_a_known_key_under_any_of_its_names_is_never_flagged(warnings_of_flowpoint):
    Configuration({"config.strict": True, **{k: OPTIONS[ALIASES.get(k, k)].default for k in [*OPTIONS, *ALIASES]
                                             if OPTIONS[ALIASES.get(k, k)].default is not None}})
    assert not warnings_of_flowpoint()
    for key in [*OPTIONS, *ALIASES]:
        assert unknown_key_problem(key, strict=True) is None, key


def test_pass_through_keys_are_flagged_only_when_close_to_a_known_key_of_their_family():
    for key in ("spark.executor.memory", "spark.sql.shuffle.partitions", "spark.executorEnv.FOO",
                "fs.s3a.connection.maximum", "hdfs.user", "gs.project-id", "s3.bucket.my-bucket.endpoint"):
        assert unknown_key_problem(key, strict=True) is None, key
    assert "'spark.master'" in unknown_key_problem("spark.mastr", strict=False)
    assert "'s3.access-key'" in unknown_key_problem("s3.acess-key", strict=False)
    assert "'state.checkpoints.dir'" in unknown_key_problem("state.checkpoint.dir", strict=False)
    assert "'state.backend.type'" in unknown_key_problem("State.Backend.Type", strict=False)  # keys are case-sensitive


# -- -D on flowpoint run -----------------------------------------------------------------------


def test_a_misspelt_dash_d_key_fails_before_the_job_runs(tmp_path, capsys):
    ran = tmp_path / "ran"
    assert main(["run", "-D", "state.backend.typ=rocksdb", job_file(tmp_path, ran)]) == 1
    err = capsys.readouterr().err
    assert "-D: unknown key 'state.backend.typ' (did you mean 'state.backend.type'?)" in err
    assert "-D config.strict=false" in err  # what to do
    assert not ran.exists()


def test_an_unknown_dash_d_key_fails_but_spark_and_filesystem_keys_pass(tmp_path, capsys):
    ran = tmp_path / "ran"
    assert main(["run", "-D", "checkpoint.interval=10s", job_file(tmp_path, ran)]) == 1
    assert "unknown key 'checkpoint.interval': flowpoint does not read it" in capsys.readouterr().err
    assert not ran.exists()
    passing = ["-D", "spark.executor.memory=2g", "-D", "fs.s3a.connection.maximum=10", "-D", "s3.endpoint=http://minio:9000",
               "-D", "execution.checkpointing.interval=10 s", "-D", "state.backend=rocksdb"]
    assert main(["run", *passing, job_file(tmp_path, ran)]) == 0
    assert ran.exists()
    assert main(["run", "-D", "s3.endpont=http://minio:9000", job_file(tmp_path, ran)]) == 1
    assert "did you mean 's3.endpoint'" in capsys.readouterr().err


def test_dash_d_config_strict_false_only_warns(tmp_path, warnings_of_flowpoint):
    ran = tmp_path / "ran"
    assert main(["run", "-D", "config.strict=false", "-D", "state.backend.typ=rocksdb", job_file(tmp_path, ran)]) == 0
    assert ran.exists()
    assert any(m.startswith("-D: unknown key 'state.backend.typ'") for m in warnings_of_flowpoint())


def test_dash_d_config_strict_true_makes_dicts_and_yaml_strict(tmp_path):
    with cli_context.cli_context(script_context({"config.strict": "true"}, None)):
        with pytest.raises(ConfigurationError, match="did you mean 'state.backend.type'"):
            StreamExecutionEnvironment.get_execution_environment({"state.backend.typ": "rocksdb"})
    (tmp_path / "flowpoint.yaml").write_text("state.checkpoint.dir: /data\n")
    with cli_context.cli_context(script_context({"config.strict": "true"}, str(tmp_path / "flowpoint.yaml"))):
        with pytest.raises(ConfigurationError, match="did you mean 'state.checkpoints.dir'"):
            StreamExecutionEnvironment.get_execution_environment()
    # a dict or file that says config.strict: false itself only warns
    Configuration({"config.strict": False, "state.backend.typ": "rocksdb"})


def test_environments_do_not_check_dash_d_keys_twice(tmp_path, warnings_of_flowpoint):
    with cli_context.cli_context(script_context({"config.strict": "false", "state.backend.typ": "rocksdb"}, None)):
        StreamExecutionEnvironment.get_execution_environment({"config.strict": True})  # -D was checked by flowpoint run
    assert not warnings_of_flowpoint()


# -- flowpoint.yaml ----------------------------------------------------------------------------


def test_a_strict_flowpoint_yaml_refuses_misspelt_keys(tmp_path):
    path = tmp_path / "flowpoint.yaml"
    path.write_text("config:\n  strict: true\nstate:\n  backend:\n    typ: rocksdb\n")
    with pytest.raises(ConfigurationError) as info:
        config_file.read_config_file(str(path))
    assert str(path) in str(info.value) and "did you mean 'state.backend.type'" in str(info.value)
    assert "config.strict: false" in str(info.value)
    path.write_text("config.strict: true\nspark.executor.memory: 2g\nhdfs.user: me\n")
    assert config_file.read_config_file(str(path)) == {"config.strict": True, "spark.executor.memory": "2g", "hdfs.user": "me"}
    path.write_text("config.strict: maybe\n")
    with pytest.raises(ConfigurationError, match="config.strict"):
        config_file.read_config_file(str(path))


# -- every key flowpoint reads is a known key ----------------------------------------------------


def test_every_key_flowpoint_reads_is_known():
    """Strict -D refuses unknown keys, so a key that flowpoint's own code reads must be known
    (declared in flowpoint.api.config.OPTIONS or ALIASES)."""
    root = os.path.dirname(flowpoint.__file__)
    pattern = re.compile(r"""(?<![A-Za-z0-9_])(?:config|configuration|conf|_config)\.get\(\s*["']([a-z0-9][a-z0-9_.-]*)["']""")
    read: dict[str, str] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for key in pattern.findall(f.read()):
                        read.setdefault(key, os.path.relpath(path, root))
    assert "state.checkpoints.dir" in read  # the pattern finds keys at all
    unknown = {k: where for k, where in read.items() if unknown_key_problem(k, strict=True)}
    assert not unknown, f"keys read by flowpoint but not declared in flowpoint.api.config: {unknown}"
