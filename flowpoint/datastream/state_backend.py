"""PyFlink's ``pyflink.datastream.state_backend``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.state_backends import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    StateBackend,
)
from flowpoint.refused import CUSTOM_BACKEND, PREDEFINED_OPTIONS, refusing

__all__ = ["EmbeddedRocksDBStateBackend", "HashMapStateBackend", "StateBackend"]

__getattr__ = refusing(
    __name__, {"CustomStateBackend": CUSTOM_BACKEND, "PredefinedOptions": PREDEFINED_OPTIONS}
)
