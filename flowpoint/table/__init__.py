"""PyFlink's ``pyflink.table`` (the Table API and SQL) is not provided: importing it, or any module
below it, raises an ImportError that says so and what to use instead (:mod:`flowpoint.refused`)."""

from flowpoint.errors import UnsupportedApiError
from flowpoint.refused import TABLE_API

_msg = f"cannot import {__name__!r}: {TABLE_API.why}; use {TABLE_API.instead}"
raise UnsupportedApiError(_msg, name=__name__)
