"""Filesystem options (S3, HDFS, GCS, ...) from the configuration.

Every key starting with ``s3.``, ``hdfs.``, ``gs.`` or ``fs.`` is a filesystem option:
checkpoint and state storage opens its filesystem with them on the driver, and every task gets
them too, so executors on other hosts reach the same storage with the same endpoint and
credentials (``s3.endpoint``, ``s3.access-key``, ``s3.secret-key``, ``s3.region``,
``s3.path.style.access``, ...; ``flowpoint.api.config`` checks the known ``s3.*`` keys). Set them
like any setting: ``-D s3.endpoint=http://minio:9000``, ``flowpoint.yaml``, or a Configuration.
Two settings about local checkpoint files go with them (``LOCAL_FILE_KEYS``):
``state.checkpoints.file-mode`` and ``security.trust-shared-directories``
(``flowpoint.checkpoint.filesystem``).
"""

from __future__ import annotations

from typing import Any

from flowpoint.api.config import STORAGE_PREFIXES, canonical_key

PREFIXES = STORAGE_PREFIXES
LOCAL_FILE_KEYS = ("state.checkpoints.file-mode", "security.trust-shared-directories")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def storage_options(config: Any) -> dict[str, str]:
    """The filesystem options of ``config`` (a Configuration or a dict), keys under their
    canonical names (``s3.access.key`` -> ``s3.access-key``), values as strings
    (booleans ``true``/``false``); unset (None) values are left out."""
    items = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
    options: dict[str, str] = {}
    for key, value in items.items():
        key = canonical_key(str(key))
        if (key.startswith(PREFIXES) or key in LOCAL_FILE_KEYS) and value is not None:
            options[key] = _text(value)
    return options
