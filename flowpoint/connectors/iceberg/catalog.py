"""Where the table is: its catalog, and the table opened, or created with the stream's columns
and identity partitions (its namespace too).

Two kinds of catalog:

* embedded (``set_warehouse(dir)``): a pyiceberg SQL catalog on SQLite,
  ``<dir>/catalog.db``, whose tables live in ``<dir>/<namespace>/<table>``. Nothing to run; one
  host (the driver and the executors must see the directory).
* any pyiceberg catalog (``set_catalog_properties({...})``): the properties go to
  ``pyiceberg.catalog.load_catalog(name, **properties)`` as they are (REST, Glue, Hive, SQL on
  PostgreSQL, ...; ``~/.pyiceberg.yaml`` and ``PYICEBERG_CATALOG__*`` too, as pyiceberg reads
  them).

Only the driver talks to the catalog; the tasks get the table's location and FileIO properties.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from flowpoint import private_files
from flowpoint.connectors.iceberg.directories import OUTPUT_DIR_MODE
from flowpoint.connectors.iceberg.errors import IcebergConfigurationError, IcebergSinkError
from flowpoint.connectors.iceberg.schema import check_existing, partition_spec

log = logging.getLogger("flowpoint")

EMBEDDED_CATALOG = "flowpoint"


@dataclass(frozen=True)
class CatalogSettings:
    """The catalog a sink writes through: ``warehouse`` (a local directory) for the embedded
    SQL catalog, else ``name`` and ``properties`` for ``load_catalog``."""

    name: str = "default"
    properties: dict[str, str] = field(default_factory=dict)
    warehouse: str | None = None

    def describe(self) -> str:
        if self.warehouse is not None:
            return f"the embedded catalog in {self.warehouse}"
        kind = self.properties.get("type") or self.properties.get("uri") or "configured"
        return f"catalog {self.name!r} ({kind})"

    def load(self, where: str) -> Any:
        try:
            if self.warehouse is not None:
                return embedded_catalog(self.warehouse)
            from pyiceberg.catalog import load_catalog

            return load_catalog(self.name, **self.properties)
        except Exception as e:  # pyiceberg's and the catalog client's own errors
            msg = (f"{where}: cannot load {self.describe()}: {type(e).__name__}: {e}; check set_catalog_properties(...) "
                   f"(pyiceberg's catalog properties) or use set_warehouse(dir) for the embedded catalog")
            raise IcebergSinkError(msg) from None


def embedded_catalog(warehouse: str) -> Any:
    """The embedded catalog of a warehouse directory, as the sink opens it: read the tables an
    ``IcebergSink`` with ``set_warehouse(warehouse)`` wrote with
    ``embedded_catalog(warehouse).load_table("db.clicks").scan().to_arrow()``. (A pyiceberg SQL
    catalog keeps its tables under its name: another name would not see them.)"""
    from pyiceberg.catalog.sql import SqlCatalog

    path = os.path.abspath(os.path.expanduser(warehouse))
    return SqlCatalog(EMBEDDED_CATALOG, uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}")


def split_identifier(table: str) -> tuple[str, str]:
    """``"db.clicks"`` -> ``("db", "clicks")``; a namespace may have several levels."""
    namespace, _, name = table.rpartition(".")
    return namespace, name


def _embedded_location(warehouse: str, table: str) -> str:
    """The location of a new table of the embedded catalog, its metadata and data directories
    made first (0755 less the umask: the catalog would make them with the umask's mode)."""
    namespace, name = split_identifier(table)
    directory = os.path.join(warehouse, *namespace.split("."), name)
    for sub in ("metadata", "data"):
        private_files.makedirs(os.path.join(directory, sub), OUTPUT_DIR_MODE, exact=False)
    return f"file://{directory}"


def open_table(settings: CatalogSettings, catalog: Any, table: str, schema: Any, partitions: list[str], where: str) -> Any:
    """The table, created if missing with ``schema`` and identity ``partitions`` (and its
    namespace); an existing table must have the stream's columns and partitions."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    try:
        try:
            existing = catalog.load_table(table)
        except NoSuchTableError:
            existing = None
        if existing is not None:
            check_existing(existing.schema(), existing.spec(), schema, partitions, where)
            return existing
        namespace, _ = split_identifier(table)
        catalog.create_namespace_if_not_exists(namespace)
        location = None if settings.warehouse is None else _embedded_location(settings.warehouse, table)
        try:
            created = catalog.create_table(table, schema=schema, partition_spec=partition_spec(schema, partitions),
                                           location=location)
        except TableAlreadyExistsError:  # another job created it meanwhile
            created = catalog.load_table(table)
            check_existing(created.schema(), created.spec(), schema, partitions, where)
            return created
        log.info("%s: created the table at %s (columns %s, partitioned by %s)", where, created.location(),
                 [f.name for f in schema.fields], partitions)
        return created
    except IcebergConfigurationError:
        raise
    except Exception as e:  # pyiceberg's, the catalog's and the storage's own errors
        msg = (f"{where}: cannot open or create the table in {settings.describe()}: {type(e).__name__}: {e}; check the "
               f"catalog settings and that the driver can reach the catalog and the table's storage")
        raise IcebergSinkError(msg) from None
