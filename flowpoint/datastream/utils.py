"""PyFlink's ``pyflink.datastream.utils``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.types import ResultTypeQueryable
from flowpoint.refused import HADOOP, JAVA_PROPERTIES, JAVA_VALUES, refusing

__all__ = ["ResultTypeQueryable"]

__getattr__ = refusing(
    __name__,
    {
        "create_hadoop_configuration": HADOOP,
        "create_java_properties": JAVA_PROPERTIES,
        "convert_to_python_obj": JAVA_VALUES,
        "pickled_bytes_to_python_obj": JAVA_VALUES,
    },
)
