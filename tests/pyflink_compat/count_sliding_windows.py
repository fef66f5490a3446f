# Count windows as PyFlink fires them: count_window(size, slide) and
# window(CountSlidingWindowAssigner.of(size, slide)) fire no window before a key has `size`
# elements, then one every `slide` elements over the last `size`; a window that is never full
# does not fire at the end of input. Tumbling count windows, and the windows' ids.
# compat: sorted
from typing import Iterable

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import ProcessWindowFunction, WindowFunction
from pyflink.datastream.window import CountSlidingWindowAssigner, CountTumblingWindowAssigner, CountWindow


class Show(ProcessWindowFunction):
    def __init__(self, label):
        self.label = label

    def process(self, key, context: ProcessWindowFunction.Context, elements: Iterable[tuple]):
        yield "%s %s %s: %s" % (self.label, key, context.window(), [e[1] for e in elements])


class Apply(WindowFunction[tuple, str, str, CountWindow]):
    def apply(self, key, window, inputs):
        yield "apply %s %s: %s" % (key, window, [e[1] for e in inputs])


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
events = env.from_collection([("a", i) for i in range(1, 8)] + [("b", 10), ("b", 20)],
                             type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
keyed = events.key_by(lambda e: e[0], key_type=Types.STRING())
keyed.count_window(3, 2).process(Show("count_window(3, 2)"), output_type=Types.STRING()).print()
keyed.window(CountSlidingWindowAssigner.of(4, 1)).process(Show("sliding(4, 1)"), output_type=Types.STRING()).print()
keyed.window(CountSlidingWindowAssigner.of(2, 3)).apply(Apply(), output_type=Types.STRING()).print()
keyed.count_window(3, 2).reduce(lambda x, y: (x[0], x[1] + y[1])).print()
keyed.count_window(2).process(Show("count_window(2)"), output_type=Types.STRING()).print()
keyed.window(CountTumblingWindowAssigner.of(3)).process(Show("tumbling(3)"), output_type=Types.STRING()).print()
env.execute("count sliding windows")
