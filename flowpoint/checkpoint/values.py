"""Values in ``_metadata`` as data: JSON, never code (docs/architecture.md, section 10a).

Reading ``_metadata`` never unpickles anything, so ``flowpoint inspect``, ``flowpoint savepoint
--dispose`` and :func:`~flowpoint.checkpoint.savepoint.describe` are safe on a file from anywhere.

:func:`to_data` turns a value into JSON exactly, types included: ``None``, ``bool``, ``int``,
``str`` and finite ``float`` as themselves, ``list`` as a list, a ``dict`` with ``str`` keys as an
object, and, tagged with a one-key object::

    {"__tuple__": [...]}          a tuple
    {"__bytes__": "<base64>"}     bytes
    {"__float__": "inf"}          inf, -inf, nan
    {"__map__": [[k, v], ...]}    a dict with other keys (or one that looks like a tag)

Anything else (a dataclass, a namedtuple, a set, a subclass of the types above) is not data:
:class:`NotData` names where it is. :func:`from_data` reverses :func:`to_data` without running
any code.

*User values* (a sink's driver state, ``CheckpointedFunction`` operator state) that are not data
are stored pickled, as ``{"__pickle__": "<base64>"}``. Reading keeps them as opaque
:class:`PickledValue` objects; only a restore unpickles them (:func:`load_user`), because only
the user's own job restores its own state (docs/checkpoints.md: a savepoint must be trusted
before it is restored).
"""

from __future__ import annotations

import base64
import binascii
import math
import pickle
from dataclasses import dataclass
from typing import Any

from flowpoint.checkpoint.integrity import decode
from flowpoint.errors import CheckpointError

TUPLE = "__tuple__"
BYTES = "__bytes__"
FLOAT = "__float__"
MAP = "__map__"
PICKLE = "__pickle__"
TAGS = frozenset({TUPLE, BYTES, FLOAT, MAP, PICKLE})


class NotData(TypeError):
    """A value that JSON cannot hold exactly; ``where`` is its place (``position[1].offset``)."""

    def __init__(self, value: Any, where: str):
        self.value = value
        self.where = where
        super().__init__(f"{where} is a {type(value).__module__}.{type(value).__qualname__} ({value!r:.120}), which is not data")


@dataclass(frozen=True)
class PickledValue:
    """A user value stored pickled in ``_metadata``: kept as bytes until a restore loads it."""

    data: bytes

    def load(self) -> Any:
        return pickle.loads(self.data)  # noqa: S301 - only a restore of the user's own state calls this

    def __repr__(self) -> str:
        return f"PickledValue(<{len(self.data)} bytes>)"


def to_data(value: Any, where: str = "value") -> Any:
    """``value`` as JSON, exactly (see the module's docstring); :class:`NotData` otherwise."""
    t = type(value)
    if value is None or t in (bool, int, str):
        return value
    if t is float:
        return value if math.isfinite(value) else {FLOAT: repr(value)}
    if t is list:
        return [to_data(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if t is tuple:
        return {TUPLE: [to_data(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if t is bytes:
        return {BYTES: base64.b64encode(value).decode("ascii")}
    if t is dict:
        if all(type(k) is str for k in value) and not (len(value) == 1 and next(iter(value)) in TAGS):
            return {k: to_data(v, f"{where}.{k}") for k, v in value.items()}
        return {MAP: [[to_data(k, f"{where} key"), to_data(v, f"{where}[{k!r}]")] for k, v in value.items()]}
    raise NotData(value, where)


def from_data(data: Any, user: bool = False) -> Any:
    """The value :func:`to_data` (or :func:`user_to_data` when ``user``) encoded as ``data``.
    Runs no code: a pickled user value comes back as a :class:`PickledValue`, and is refused
    where only data may be (``user`` False). CheckpointError for malformed input."""
    t = type(data)
    if data is None or t in (bool, int, str, float):
        return data
    if t is list:
        return [from_data(v, user) for v in data]
    if t is not dict:
        raise _malformed(data)
    if len(data) == 1:
        tag, inner = next(iter(data.items()))
        if tag in TAGS:
            return _tagged(tag, inner, user)
    return {k: from_data(v, user) for k, v in data.items()}


def _tagged(tag: str, inner: Any, user: bool) -> Any:
    if tag == TUPLE and type(inner) is list:
        return tuple(from_data(v, user) for v in inner)
    if tag == MAP and type(inner) is list and all(type(p) is list and len(p) == 2 for p in inner):
        out = {}
        for k, v in inner:
            key = from_data(k, user)
            try:
                out[key] = from_data(v, user)
            except TypeError as e:  # an unhashable key
                raise _malformed({tag: inner}) from e
        return out
    if tag == FLOAT and inner in ("inf", "-inf", "nan"):
        return float(inner)
    if tag in (BYTES, PICKLE) and type(inner) is str:
        try:
            raw = base64.b64decode(inner, validate=True)
        except (binascii.Error, ValueError) as e:
            raise _malformed({tag: inner}) from e
        if tag == BYTES:
            return raw
        if user:
            return PickledValue(raw)
        msg = "a pickled value where checkpoint metadata holds only data (a crafted or damaged _metadata)"
        raise CheckpointError(msg)
    raise _malformed({tag: inner})


def _malformed(data: Any) -> CheckpointError:
    return CheckpointError(f"malformed value in checkpoint metadata: {data!r:.200}")


def user_to_data(value: Any, where: str = "value") -> Any:
    """A user value as data if it is data, else pickled (``{"__pickle__": ...}``)."""
    if isinstance(value, PickledValue):
        return {PICKLE: base64.b64encode(value.data).decode("ascii")}
    try:
        return to_data(value, where)
    except NotData:
        pass
    import cloudpickle

    try:
        raw = cloudpickle.dumps(value, protocol=pickle.DEFAULT_PROTOCOL)
    except Exception as e:
        msg = f"cannot store {where} ({type(value).__name__} {value!r:.200}) in checkpoint metadata: it is neither data nor picklable ({e})"
        raise CheckpointError(msg) from e
    return {PICKLE: base64.b64encode(raw).decode("ascii")}


def load_user(value: Any, uri: str | None = None, what: str = "a pickled value in") -> Any:
    """A user value read by :func:`from_data` with ``user=True``, unpickled if it was pickled.
    Only a restore calls this. With ``uri`` (the ``_metadata`` file), a pickle that does not
    load raises StateDecodeError naming it and ``what`` the value is."""
    if not isinstance(value, PickledValue):
        return value
    if uri is None:
        return value.load()

    return decode(pickle.loads, value.data, uri, None, what)
