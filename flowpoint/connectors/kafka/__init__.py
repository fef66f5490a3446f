"""Kafka connector: the embedded Tansu broker (broker.py) and the replayable KafkaSource."""

from flowpoint.connectors.kafka.broker import BrokerStartError, EmbeddedKafka

__all__ = ["BrokerStartError", "EmbeddedKafka"]
