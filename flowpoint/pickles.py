"""Pickling records and state values, on any side."""

from __future__ import annotations

import pickle
from typing import Any


def dumps(obj: Any) -> bytes:
    """Pickle records or state values; classes defined in the job's ``__main__`` (which workers
    cannot import) are pickled by value through cloudpickle. ``pickle.loads`` reads both."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle

        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
