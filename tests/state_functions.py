"""Reduce and aggregate functions the state tests share (heap, RocksDB, end to end)."""

from flowpoint import AggregateFunction, ReduceFunction


class SumReduce(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


class AverageAggregate(AggregateFunction):
    """Accumulator ``[sum, count]`` mutated in place, as Flink aggregate functions often do."""

    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


class MaxAggregate(AggregateFunction):
    """Immutable accumulator (a tuple) returned anew by ``add``."""

    def create_accumulator(self):
        return (None, 0)

    def add(self, value, accumulator):
        best, n = accumulator
        return (value if best is None or value > best else best, n + 1)

    def get_result(self, accumulator):
        return accumulator
