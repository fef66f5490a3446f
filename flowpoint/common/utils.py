"""PyFlink's ``pyflink.common.utils``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import JAVA_OBJECT, refusing

__all__ = []

__getattr__ = refusing(__name__, {"JavaObjectWrapper": JAVA_OBJECT})
