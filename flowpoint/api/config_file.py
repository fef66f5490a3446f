"""``flowpoint.yaml``: settings for every environment a job creates, under code and ``-D``.

Which file (the first that applies):

1. ``--conf <file or folder>`` of ``flowpoint run`` (``set_conf_path``); it must exist;
2. ``$FLOWPOINT_CONF_DIR/flowpoint.yaml``; it must exist when the variable is set (as Flink's
   ``FLINK_CONF_DIR``);
3. ``flowpoint.yaml`` in the job script's folder;
4. none.

Keys are Flink's, flat (``state.backend.type: rocksdb``) or nested as in Flink 1.19+'s
``config.yaml`` (``state: {backend: {type: rocksdb}}``); both are read as dotted keys. The file is
YAML 1.2 as in Flink: only ``true``/``false`` are booleans (``restart-strategy.type: off`` is the
string ``off``). Values are checked like ``-D`` values; errors name the file and the key.
``spark.*`` keys go to the SparkSession flowpoint creates (``spark: {executor: {memory: 4g}}``
is ``spark.executor.memory``); ``s3.*``, ``hdfs.*``, ``gs.*``, ``fs.*`` keys are filesystem
options of checkpoint and state storage, on the driver and the executors.
Relative directories are resolved against the current directory, as Flink does.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
from typing import Any

import yaml

from flowpoint.api.config import (
    ALIASES,
    OPTIONS,
    PASS_THROUGH_PREFIXES,
    canonical_key,
    parse_option,
)
from flowpoint.errors import ConfigurationError

FILE_NAME = "flowpoint.yaml"
CONF_DIR_VARIABLE = "FLOWPOINT_CONF_DIR"

log = logging.getLogger("flowpoint")

_conf_path: str | None = None


def set_conf_path(path: str | None) -> None:
    """``flowpoint run --conf <file or folder>``: the configuration file every environment reads."""
    global _conf_path
    _conf_path = path


def get_conf_path() -> str | None:
    return _conf_path


def job_path_from_argv() -> str | None:
    """The running job script (``python job.py`` and ``flowpoint run job.py`` both set argv[0])."""
    script = sys.argv[0] if sys.argv else ""
    return script if script.endswith(".py") and os.path.isfile(script) else None


def find_config_file(job_path: str | None, conf: str | None) -> str | None:
    if conf:
        path = os.path.join(conf, FILE_NAME) if os.path.isdir(conf) else conf
        if not os.path.isfile(path):
            msg = f"configuration file {path!r} (--conf) not found"
            raise ConfigurationError(msg)
        return path
    conf_dir = os.environ.get(CONF_DIR_VARIABLE)
    if conf_dir:
        path = os.path.join(conf_dir, FILE_NAME)
        if not os.path.isfile(path):
            msg = f"${CONF_DIR_VARIABLE} is {conf_dir!r} but it has no {FILE_NAME}"
            raise ConfigurationError(msg)
        return path
    if job_path:
        path = os.path.join(os.path.dirname(os.path.abspath(job_path)), FILE_NAME)
        if os.path.isfile(path):
            return path
    return None


def load_config_file(job_path: str | None, conf: str | None) -> dict[str, Any]:
    """The settings of the configuration file that applies (see the module doc), as dotted keys."""
    path = find_config_file(job_path, conf)
    if path is None:
        return {}
    settings = read_config_file(path)
    log.info("configuration from %s: %d settings", path, len(settings))
    return settings


def read_config_file(path: str) -> dict[str, Any]:
    """``path``'s settings as dotted keys, each value checked as ``Configuration.set`` does."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except OSError as e:
        msg = f"cannot read configuration file {path!r}: {e}"
        raise ConfigurationError(msg) from None
    except yaml.YAMLError as e:
        msg = f"configuration file {path!r} is not valid YAML: {e}"
        raise ConfigurationError(msg) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        msg = f"configuration file {path!r} must be a mapping of keys to values (key: value lines); got a {type(data).__name__}"
        raise ConfigurationError(msg)
    settings: dict[str, Any] = {}
    _flatten(data, "", settings, path)
    seen: dict[str, str] = {}
    for key, value in settings.items():
        other = seen.setdefault(canonical_key(key), key)
        if other != key:
            msg = f"configuration file {path!r} sets both {other!r} and {key!r}, two names of one setting; keep one"
            raise ConfigurationError(msg)
        try:
            parse_option(key, value)
        except ConfigurationError as e:
            msg = f"configuration file {path!r}: {e}"
            raise ConfigurationError(msg) from None
        _warn_if_misspelt(key, path)
    return settings


def _flatten(data: dict, prefix: str, out: dict[str, Any], path: str) -> None:
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            _flatten(v, key + ".", out, path)
        elif v is not None:  # `key:` with no value leaves the key unset
            if key in out:
                msg = f"configuration file {path!r} sets {key!r} twice (once nested, once as a dotted key)"
                raise ConfigurationError(msg)
            out[key] = v


_KNOWN = sorted({*OPTIONS, *ALIASES})


def _warn_if_misspelt(key: str, path: str) -> None:
    """An unknown key close to a known one is likely a typo. ``spark.*`` (passed to Spark) and
    filesystem options (``s3.*``, ``hdfs.*``, ...) are compared only with known keys of their own
    family, so ``spark.executor.memory`` or ``fs.s3a.connection.maximum`` pass quietly."""
    if key in OPTIONS or key in ALIASES:
        return
    known = _KNOWN
    family = next((p for p in PASS_THROUGH_PREFIXES if key.startswith(p)), None)
    if family is not None:
        known = [k for k in _KNOWN if k.startswith(family)]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
    if close:
        log.warning("%s: unknown key %r (did you mean %r?)", path, key, close[0])


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans (true/false only, as Flink's config.yaml) and no duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in keys:
                mark = key_node.start_mark
                msg = f"duplicate key {key!r} (line {mark.line + 1})"
                raise yaml.constructor.ConstructorError(None, None, msg, mark)
            keys.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
