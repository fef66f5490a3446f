"""``flowpoint.yaml``: settings for every environment a job creates, under code and ``-D``.

Which file (the first that applies):

1. ``--conf <file or folder>`` of ``flowpoint run`` (its CLI context, ``api/cli_context.py``); it must exist;
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
options of checkpoint and state storage, on the driver and the executors. A key close to a known
one (``state.backend.typ``) is warned about, naming the known key; with ``config.strict: true``
in the file (or ``flowpoint run -D config.strict=true``) every unknown key outside those
pass-through families, and every misspelt one, fails with ConfigurationError.
Relative directories are resolved against the current directory, as Flink does.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

import yaml

from flowpoint.api import cli_context
from flowpoint.api.config import (
    STRICT_KEY,
    canonical_key,
    check_key,
    parse_option,
)
from flowpoint.errors import ConfigurationError

FILE_NAME = "flowpoint.yaml"
CONF_DIR_VARIABLE = "FLOWPOINT_CONF_DIR"

log = logging.getLogger("flowpoint")



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
    strict = _strict(settings, path)
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
        check_key(key, strict, f"configuration file {path!r}", f"set {STRICT_KEY}: false in it")
    return settings


def _strict(settings: dict[str, Any], path: str) -> bool:
    """Unknown keys of the file are errors when it sets ``config.strict: true`` (or, when it does
    not set it, ``flowpoint run -D config.strict=true`` did); otherwise typos are warned about."""
    if STRICT_KEY in settings:
        try:
            return bool(parse_option(STRICT_KEY, settings[STRICT_KEY]))
        except ConfigurationError as e:
            msg = f"configuration file {path!r}: {e}"
            raise ConfigurationError(msg) from None
    return bool(cli_context.current().strict)


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
