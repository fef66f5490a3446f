"""The split planner without Spark: planning never moves a split, committing does, and one
source subtask can be planned alone (what a loop that drives each subtask needs)."""

from flowpoint import StreamExecutionEnvironment
from flowpoint.driver.splits import SplitPlanner


def planner(parallelism=2, end=100):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.from_sequence(1, end).uid("seq").print()
    graph = env.get_stream_graph()
    p = SplitPlanner(graph)
    p.init()
    return p, graph.sources()[0]


def test_a_plan_shares_the_budget_and_moves_nothing_until_it_commits():
    p, node = planner()
    plan = p.plan(10, 0.0)
    assert plan.records == 10
    assert plan.positions == {(node.id, 0): (6, False), (node.id, 1): (56, False)}
    assert [st.position for st in p.states()] == [1, 51]  # not committed yet
    p.advance(plan.positions)
    assert [st.position for st in p.states()] == [6, 56]
    assert [(sp.source_uid, sp.split_id, sp.finished) for sp in p.positions()] == [("seq", "index-0", False), ("seq", "index-1", False)]


def test_one_source_subtask_is_planned_alone_with_the_whole_budget():
    p, node = planner()
    plan = p.plan_partition(node, 1, 10, 0.0)
    assert plan.positions == {(node.id, 1): (61, False)}
    assert plan.reads[node.stage_id][0] == []
    assert [entry[0] for entry in plan.reads[node.stage_id][1]] == [1]  # split index 1 only
    assert plan.records == 10


def test_the_input_ends_when_every_split_finished():
    p, node = planner(end=10)
    plan = p.plan(1000, 0.0)
    assert p.all_finished(plan.positions) and not p.all_finished()
    assert not p.finished((node.id, 0))
    p.advance(plan.positions)
    assert p.all_finished() and p.finished((node.id, 0))
    assert p.plan(1000, 0.0).positions == {}  # finished splits are not planned again
