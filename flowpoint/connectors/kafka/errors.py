"""Errors of the Kafka source. Each names the broker, topic, partition or offset involved and
says what to do; ``recoverable`` says whether a restart can get past it (flowpoint/errors.py)."""

from __future__ import annotations

from flowpoint.errors import ConfigurationError, FlowpointError


class KafkaError(FlowpointError):
    """Root of the Kafka connector's errors."""

    recoverable = True


class KafkaUnreachableError(KafkaError):
    """The brokers did not answer within the source's timeout (``default.api.timeout.ms``).
    Recoverable: a broker outage may end, and the restart strategy bounds the retries."""

    recoverable = True


class KafkaReadTimeoutError(KafkaError):
    """A task could not read a planned offset range within the timeout (retried by Spark)."""

    recoverable = True


class KafkaDeserializationError(KafkaError):
    """A record the value deserializer could not read. Not recoverable: the same record would
    fail again after any restart; skip such records with ``deserialization.skip-errors``."""

    recoverable = False

    def __init__(self, message: str, topic: str = "", partition: int = -1, offset: int = -1):
        super().__init__(message)
        self.topic, self.partition, self.offset = topic, partition, offset

    def __reduce__(self):
        return (type(self), (str(self), self.topic, self.partition, self.offset))


class KafkaOffsetOutOfRangeError(KafkaError):
    """A partition's position is outside the offsets the broker holds and ``auto.offset.reset``
    is ``none`` (``error``): the job cannot choose where to go on."""

    recoverable = False


class KafkaConfigurationError(ConfigurationError, KafkaError):
    """A KafkaSource built or configured wrongly."""

    recoverable = False
