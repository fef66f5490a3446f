# Async I/O: ordered and unordered waits, a timeout handled by timeout(), a retry on a result.
# compat: sorted
import asyncio

from pyflink.common import Time, Types
from pyflink.datastream import AsyncDataStream, AsyncFunction, AsyncRetryStrategy, StreamExecutionEnvironment


class Lookup(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(0.01 * (5 - value % 5))  # later records answer sooner
        return [value * 10, value * 10 + 1]


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        if value == 3:
            await asyncio.sleep(10)
        return [value]

    def timeout(self, value):
        return [-value]


class Flaky(AsyncFunction):
    def open(self, runtime_context):
        self.seen = set()

    async def async_invoke(self, value):
        if value not in self.seen:  # the first answer for a record is empty: the strategy retries
            self.seen.add(value)
            return []
        return ["ok %d" % value]


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
ds = env.from_collection([1, 2, 3, 4, 5], type_info=Types.INT())
AsyncDataStream.ordered_wait(ds, Lookup(), Time.seconds(5), 2, Types.INT()).print("ordered")
AsyncDataStream.unordered_wait(ds, Lookup(), Time.seconds(5), 10, Types.INT()).print("unordered")
AsyncDataStream.unordered_wait(ds, Slow(), Time.milliseconds(500), 10, Types.INT()).print("timeout")
retry = AsyncRetryStrategy.fixed_delay(3, 10, lambda result: result == [], None)
AsyncDataStream.unordered_wait_with_retry(ds, Flaky(), Time.seconds(5), retry, 10, Types.STRING()).print("retry")
env.execute("async")
