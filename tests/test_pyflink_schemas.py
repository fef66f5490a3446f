"""PyFlink's serialization schemas and Kafka topic selector (no Spark, no broker): what each
makes of a record, and how each refuses what it cannot write."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from flowpoint import Row, Types
from flowpoint.common.serialization import ByteArraySchema, RowFieldExtractorSchema
from flowpoint.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaTopicSelector
from flowpoint.datastream.formats.json import (
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
)
from flowpoint.errors import ConfigurationError


def test_byte_array_schema_passes_bytes_both_ways():
    schema = ByteArraySchema()
    assert schema.serialize(bytearray(b"\x00\xff")) == b"\x00\xff"
    assert schema.deserialize(b"abc") == b"abc"
    assert schema.get_produced_type() == Types.PRIMITIVE_ARRAY(Types.BYTE())
    with pytest.raises(TypeError, match="serializes bytes; got str"):
        schema.serialize("abc")


def test_row_field_extractor_takes_one_bytes_field():
    assert RowFieldExtractorSchema(1).serialize(Row(b"k", b"v")) == b"v"
    with pytest.raises(TypeError, match="must be bytes; got int"):
        RowFieldExtractorSchema(0).serialize((1, b"v"))
    with pytest.raises(ValueError, match="needs a row with a field 2"):
        RowFieldExtractorSchema(2).serialize((b"k", b"v"))
    with pytest.raises(ValueError, match="non-negative"):
        RowFieldExtractorSchema(-1)


def test_json_row_serialization_round_trips_through_the_deserialization_schema():
    row_type = Types.ROW_NAMED(["id", "name", "amount"], [Types.INT(), Types.STRING(), Types.BIG_DEC()])
    out = JsonRowSerializationSchema.builder().with_type_info(row_type).build()
    data = out.serialize(Row(id=1, name="é", amount=Decimal("2.50")))
    assert json.loads(data) == {"id": 1, "name": "é", "amount": "2.50"}
    assert data.startswith(b'{"id":1,')  # compact, in the type's field order
    back = JsonRowDeserializationSchema.Builder().type_info(row_type).build().deserialize(out.serialize((2, "x", None)))
    assert (back.id, back.name, back.amount) == (2, "x", None)
    with pytest.raises(ConfigurationError, match="needs a row type"):
        JsonRowSerializationSchema.builder().with_type_info(Types.STRING())
    with pytest.raises(ValueError, match="needs a row of the fields"):
        out.serialize((1, 2))


def test_a_topic_selector_picks_the_topic():
    class ByKey(KafkaTopicSelector):
        def apply(self, data):
            return "topic-" + data[0].decode()

    schema = KafkaRecordSerializationSchema.builder().set_topic_selector(ByKey()) \
        .set_key_serialization_schema(RowFieldExtractorSchema(0)) \
        .set_value_serialization_schema(RowFieldExtractorSchema(1)).build()
    assert schema.serialize(Row(b"a", b"v")) == ("topic-a", b"a", b"v")
    plain = KafkaRecordSerializationSchema.builder().set_topic_selector(lambda r: "t" + r[0].decode()) \
        .set_value_serialization_schema(RowFieldExtractorSchema(1)).build()
    assert plain.serialize((b"b", b"w")) == ("tb", None, b"w")
