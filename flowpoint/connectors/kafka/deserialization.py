"""Value (de)serialization schemas with PyFlink's names.

``SimpleStringSchema`` (UTF-8 text both ways, as ``pyflink.common.serialization``),
``ByteArraySchema`` (bytes as they are), ``RowFieldExtractorSchema(i)`` (field ``i`` of a row,
which must be bytes), ``JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(...)).build()``
(a JSON object per record -> ``Row``) and ``JsonRowSerializationSchema`` (a row -> a JSON object). A schema raises on bytes it cannot read; the Kafka reader turns
that into an error naming topic, partition and offset, or skips the record when asked to.
Schemas are small picklable objects: they travel to the executors inside the reader.
"""

from __future__ import annotations

import json
from typing import Any

from flowpoint.api.row import Row
from flowpoint.api.types import RowType, TypeInformation, Types
from flowpoint.connectors.kafka.errors import KafkaConfigurationError


class DeserializationSchema:
    """Bytes of a record's value -> a value of :meth:`get_produced_type`."""

    ignore_parse_errors = False  # skip (and count) records this schema cannot read

    def deserialize(self, message: bytes | None) -> Any:
        raise NotImplementedError

    def get_produced_type(self) -> TypeInformation | None:
        return None


class SerializationSchema:
    """A value -> bytes (the Kafka sink's value and key schemas)."""

    def serialize(self, element: Any) -> bytes:
        raise NotImplementedError


class SimpleStringSchema(DeserializationSchema, SerializationSchema):
    """Strings as bytes in ``charset`` (UTF-8), both ways."""

    def __init__(self, charset: str = "utf-8"):
        self.charset = charset

    def deserialize(self, message: bytes | None) -> str:
        if message is None:
            msg = "the record has no value (a tombstone); SimpleStringSchema needs bytes"
            raise ValueError(msg)
        return message.decode(self.charset)

    def serialize(self, element: Any) -> bytes:
        return str(element).encode(self.charset)

    def get_produced_type(self) -> TypeInformation:
        return Types.STRING()


class ByteArraySchema(DeserializationSchema, SerializationSchema):
    """Bytes as they are, both ways."""

    def deserialize(self, message: bytes | None) -> bytes:
        if message is None:
            msg = "the record has no value (a tombstone); ByteArraySchema needs bytes"
            raise ValueError(msg)
        return bytes(message)

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, (bytes, bytearray)):
            msg = f"ByteArraySchema serializes bytes; got {type(element).__name__} (encode it first)"
            raise TypeError(msg)
        return bytes(element)

    def get_produced_type(self) -> TypeInformation:
        return Types.PRIMITIVE_ARRAY(Types.BYTE())


class RowFieldExtractorSchema(SerializationSchema):
    """Field ``field_index`` of a row (or tuple), which must already be bytes: e.g. a Kafka
    record's key (``set_key_serialization_schema(RowFieldExtractorSchema(0))``)."""

    def __init__(self, field_index: int):
        if not isinstance(field_index, int) or isinstance(field_index, bool) or field_index < 0:
            msg = f"Field index must be non-negative, got: {field_index}"
            raise ValueError(msg)
        self.field_index = field_index

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, (tuple, list)) or self.field_index >= len(element):
            msg = f"RowFieldExtractorSchema({self.field_index}) needs a row with a field {self.field_index}; got {element!r:.80}"
            raise ValueError(msg)
        field = element[self.field_index]
        if not isinstance(field, (bytes, bytearray)):
            msg = f"RowFieldExtractorSchema({self.field_index}): the field must be bytes; got {type(field).__name__} (encode it first)"
            raise TypeError(msg)
        return bytes(field)


class JsonRowSerializationSchema(SerializationSchema):
    """A row -> a JSON object of the fields of ``type_info`` (a named row type), compact, in the
    type's field order; values JSON cannot hold (decimals, dates, times) are written as their
    ``str``. ``JsonRowSerializationSchema.builder().with_type_info(type_info).build()``."""

    def __init__(self, type_info: RowType):
        self.type_info = type_info
        self.field_names = tuple(type_info.field_names)

    class Builder:
        def __init__(self) -> None:
            self._type_info: RowType | None = None

        def with_type_info(self, type_info: TypeInformation) -> JsonRowSerializationSchema.Builder:
            if not isinstance(type_info, RowType):
                msg = f"JsonRowSerializationSchema needs a row type (Types.ROW_NAMED([...], [...])); got {type_info!r}"
                raise KafkaConfigurationError(msg)
            self._type_info = type_info
            return self

        def build(self) -> JsonRowSerializationSchema:
            if self._type_info is None:
                msg = "JsonRowSerializationSchema.builder() needs .with_type_info(Types.ROW_NAMED([...], [...])) before build()"
                raise KafkaConfigurationError(msg)
            return JsonRowSerializationSchema(self._type_info)

    @staticmethod
    def builder() -> JsonRowSerializationSchema.Builder:
        return JsonRowSerializationSchema.Builder()

    def serialize(self, element: Any) -> bytes:
        if isinstance(element, dict):
            values = [element.get(n) for n in self.field_names]
        elif isinstance(element, (tuple, list)) and len(element) == len(self.field_names):
            values = list(element)
        else:
            msg = f"JsonRowSerializationSchema needs a row of the fields {list(self.field_names)}; got {element!r:.80}"
            raise ValueError(msg)
        obj = dict(zip(self.field_names, values, strict=True))
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")


class JsonRowDeserializationSchema(DeserializationSchema):
    """A JSON object per record -> ``Row`` of the fields of ``type_info`` (a named row type),
    in its order. A missing field is None unless ``fail_on_missing_field()``;
    ``ignore_parse_errors()`` skips records that are not such JSON (counted in the metrics)."""

    def __init__(self, type_info: RowType, fail_on_missing_field: bool = False, ignore_parse_errors: bool = False):
        self.type_info = type_info
        self.field_names = tuple(type_info.field_names)
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors

    @staticmethod
    def builder() -> JsonRowDeserializationSchemaBuilder:
        return JsonRowDeserializationSchemaBuilder()

    def deserialize(self, message: bytes | None) -> Row:
        if message is None:
            msg = "the record has no value (a tombstone); JsonRowDeserializationSchema needs a JSON object"
            raise ValueError(msg)
        obj = json.loads(message)
        if not isinstance(obj, dict):
            msg = f"expected a JSON object with fields {list(self.field_names)}; got {type(obj).__name__}"
            raise ValueError(msg)
        if self.fail_on_missing_field:
            missing = [f for f in self.field_names if f not in obj]
            if missing:
                msg = f"the JSON object has no field(s) {missing} (fail_on_missing_field)"
                raise ValueError(msg)
        get = obj.get
        return Row.of(self.field_names, [get(f) for f in self.field_names])

    def get_produced_type(self) -> TypeInformation:
        return self.type_info


class JsonRowDeserializationSchemaBuilder:
    def __init__(self) -> None:
        self._type_info: RowType | None = None
        self._fail_on_missing_field = False
        self._ignore_parse_errors = False

    def type_info(self, type_info: TypeInformation) -> JsonRowDeserializationSchemaBuilder:
        if not isinstance(type_info, RowType):
            msg = f"JsonRowDeserializationSchema needs a row type (Types.ROW_NAMED([...], [...])); got {type_info!r}"
            raise KafkaConfigurationError(msg)
        self._type_info = type_info
        return self

    def fail_on_missing_field(self) -> JsonRowDeserializationSchemaBuilder:
        self._fail_on_missing_field = True
        return self

    def ignore_parse_errors(self) -> JsonRowDeserializationSchemaBuilder:
        self._ignore_parse_errors = True
        return self

    def build(self) -> JsonRowDeserializationSchema:
        if self._type_info is None:
            msg = "JsonRowDeserializationSchema.builder() needs .type_info(Types.ROW_NAMED([...], [...])) before build()"
            raise KafkaConfigurationError(msg)
        return JsonRowDeserializationSchema(self._type_info, self._fail_on_missing_field, self._ignore_parse_errors)


JsonRowDeserializationSchema.Builder = JsonRowDeserializationSchemaBuilder  # type: ignore[attr-defined] - PyFlink's nested name
