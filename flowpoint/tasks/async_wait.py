"""The async I/O operator (``AsyncDataStream``; flowpoint/api/async_io.py has the contract).

Each batch of records is one round on the operator's asyncio event loop: a call per record, at
most ``capacity`` running at once, each (with its retries) bounded by the timeout. The batch's
results are emitted when every call finished, so no call is in flight at an epoch boundary or
across a watermark; ``ordered`` keeps input order, otherwise results go out in completion order.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from flowpoint.errors import FlowpointError
from flowpoint.tasks.batches import as_rows
from flowpoint.tasks.operators import Operator, user_error


class AsyncWaitOp(Operator):
    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.loop = asyncio.new_event_loop()
        options = self.spec.options
        self.timeout_s = options["timeout_ms"] / 1000
        self.capacity = options["capacity"]
        self.ordered = options["ordered"]
        self.retry = options["retry"]

    def close(self) -> None:
        try:
            super().close()
        finally:
            loop = getattr(self, "loop", None)
            if loop is not None and not loop.is_closed():
                loop.close()

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = as_rows(data, self.spec.input_type)
        self.records_in += len(rows)
        if not rows:
            return
        done: list[tuple[int, list]] = []
        try:
            self.loop.run_until_complete(self._round(rows, done))
        except FlowpointError:
            raise
        except Exception as e:  # a call failed for good: name the operator and the record
            raise user_error(self.spec, e, getattr(e, "flowpoint_record", None)) from e
        if self.ordered:
            done.sort(key=lambda d: d[0])
        out: list = []
        out_ts: list | None = None if ts is None else []
        for i, results in done:
            out.extend(results)
            if out_ts is not None:
                out_ts.extend([ts[i]] * len(results))  # type: ignore[index]
        self.emit(origin, out, out_ts)

    async def _round(self, rows: list, done: list) -> None:
        gate = asyncio.Semaphore(self.capacity)

        async def one(i: int, value: Any) -> None:
            async with gate:
                try:
                    results = await asyncio.wait_for(self._call(value), self.timeout_s)
                except asyncio.TimeoutError:
                    try:
                        results = self.spec.function.timeout(value)
                    except Exception as e:
                        e.flowpoint_record = value  # type: ignore[attr-defined]
                        raise
                except Exception as e:
                    e.flowpoint_record = value  # type: ignore[attr-defined]
                    raise
                done.append((i, list(results) if results is not None else []))

        await asyncio.gather(*(one(i, v) for i, v in enumerate(rows)))

    async def _call(self, value: Any) -> Any:
        """One call with the retry strategy: again while the result or the exception matches its
        predicate and the strategy allows another attempt, after its backoff."""
        f = self.spec.function.async_invoke
        predicate = self.retry.get_retry_predicate()
        on_result, on_error = predicate.result_predicate(), predicate.exception_predicate()
        attempt = 1
        while True:
            try:
                result = f(value)
                if inspect.isawaitable(result):
                    result = await result
            except asyncio.TimeoutError:
                raise
            except Exception as e:
                if on_error is not None and on_error(e) and self.retry.can_retry(attempt + 1):
                    await asyncio.sleep(self.retry.get_backoff_time_millis(attempt) / 1000)
                    attempt += 1
                    continue
                raise
            if on_result is not None and on_result(result) and self.retry.can_retry(attempt + 1):
                await asyncio.sleep(self.retry.get_backoff_time_millis(attempt) / 1000)
                attempt += 1
                continue
            return result
