"""Filesystem options (S3, HDFS, ...) from the configuration: checkpoint storage uses them on the
driver, and every task gets them, so executors reach the same storage."""

from __future__ import annotations

from typing import Any

PREFIXES = ("s3.", "hdfs.", "gs.", "fs.")


def storage_options(config: Any) -> dict[str, str]:
    items = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return {str(k): str(v) for k, v in items.items() if str(k).startswith(PREFIXES) and v is not None}
