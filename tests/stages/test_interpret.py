"""Stage `interpret`: the paths and events of small functions (`Interpreter.run_function`,
`run_module`, `nested_roots`) -> `Region`s of `Path`s, each a condition, events and an exit."""

from __future__ import annotations

from collcheck.static.program import CommEvent, EventKind, ExitKind, LoopEvent, Region, RegionKind, Site
from collcheck.static.symbolic import RANK, Atom, Compare, Const, GroupVal, Not, is_rank_dependent

from .conftest import comm_events, interpreter_of, line_of, op_sequences, ops, regions_of

RANK_ZERO = Compare("==", RANK, Const(0))


def test_a_rank_test_forks_two_paths_with_the_test_and_its_negation() -> None:
    body = """
    def f(t):
        if dist.get_rank() == 0:
            return
        dist.all_reduce(t)
    """
    (region,) = regions_of(body)
    assert region.kind is RegionKind.FUNCTION and region.function == "f"
    early, late = region.paths
    assert early.conds == (RANK_ZERO,) and early.events == ()
    assert early.exit is not None and early.exit.kind is ExitKind.RETURN
    assert early.exit.line == line_of(body, "return")
    assert late.conds == (Not(RANK_ZERO),) and ops(late) == ("all_reduce",) and late.exit is None
    (event,) = comm_events(late.events)
    assert (event.kind, event.line, event.chain) == (EventKind.COLLECTIVE, line_of(body, "all_reduce"), ())


def test_raises_and_process_exits_end_paths_with_their_kind() -> None:
    body = """
    import sys
    class Boom(Exception):
        pass
    def f(t):
        if t is None:
            raise Boom("no tensor")
        if dist.get_rank() == 1:
            sys.exit(1)
        dist.barrier()
    """
    (region,) = regions_of(body)
    exits = [(p.exit.kind, p.exit.raised) if p.exit else None for p in region.paths]
    assert exits == [(ExitKind.RAISE, "Boom"), (ExitKind.EXIT, ""), None]
    assert not is_rank_dependent(region.paths[0].conds[0])  # `t is None`: the caller's value
    assert ops(region.paths[2]) == ("barrier",)


def test_a_short_constant_loop_is_unrolled_and_a_while_loop_is_one_element_and_a_region() -> None:
    body = """
    def f(t):
        for _ in range(2):
            dist.barrier()
        while t.pending():
            dist.all_reduce(t)
    """
    function, loop = regions_of(body)
    (path,) = function.paths
    assert ops(path) == ("barrier", "barrier", "loop[all_reduce]")
    element = path.events[2]
    assert isinstance(element, LoopEvent) and element.body_ops == ("all_reduce",)
    assert element.line == line_of(body, "while")
    assert (
        loop.kind is RegionKind.LOOP
        and loop.line == line_of(body, "while")
        and op_sequences(loop) == {("all_reduce",)}
    )


def test_a_counted_loop_region_knows_its_range() -> None:
    body = """
    def f(t, n):
        for i in range(n):
            if i == 0:
                dist.barrier()
    """
    function, loop = regions_of(body)
    assert op_sequences(function) == {("loop[barrier]",)}
    assert loop.loop_range is not None and loop.loop_range.start == Const(0) and loop.loop_range.step == 1
    assert op_sequences(loop) == {("barrier",), ()}


def test_an_inlined_helpers_events_carry_the_call_site() -> None:
    body = """
    def sync(t):
        dist.broadcast(t, src=dist.get_rank())
    def f(t):
        dist.all_reduce(t)
        sync(t)
    """
    (region,) = regions_of(body)
    (path,) = region.paths
    reduce, broadcast = comm_events(path.events)
    assert reduce.chain == ()
    assert broadcast.line == line_of(body, "dist.broadcast")
    (site,) = broadcast.chain
    assert isinstance(site, Site) and (site.caller, site.callee, site.line) == (
        "f",
        "sync",
        line_of(body, "    sync(t)"),
    )
    assert broadcast.root == RANK  # the root argument, evaluated in the helper


def test_a_created_group_is_the_event_group_with_its_members() -> None:
    body = """
    def f(t):
        g = dist.new_group([0, 1])
        dist.all_reduce(t, group=g)
        dist.barrier()
    """
    (region,) = regions_of(body)
    create, reduce, barrier = comm_events(region.paths[0].events)
    assert create.kind is EventKind.GROUP_CREATE and create.group is None
    assert isinstance(reduce.group, GroupVal) and reduce.group.created and reduce.group.members is not None
    assert barrier.group is None  # the default group


def test_a_method_runs_with_its_class() -> None:
    body = """
    class Trainer:
        def __init__(self):
            self.rank = dist.get_rank()
        def step(self, t):
            if self.rank == 0:
                dist.barrier()
    """
    (region,) = regions_of(body, "Trainer.step")
    assert op_sequences(region) == {("barrier",), ()}
    assert all(is_rank_dependent(c) for p in region.paths for c in p.conds)


def test_module_code_is_one_region_and_escaping_nested_functions_are_roots() -> None:
    body = """
    def f(pool):
        def work(t):
            dist.all_reduce(t)
        pool.submit(work)
    if dist.get_rank() == 0:
        dist.barrier()
    """
    interpreter = interpreter_of(body)
    regions: list[Region] = interpreter.run_module(interpreter.module.tree.body)
    assert regions[0].function == "<module>" and op_sequences(regions[0]) == {("barrier",), ()}
    node = interpreter.module.functions["f"]
    interpreter.run_function(node, None, "f")
    roots = interpreter.nested_roots(node, "f")
    assert [(inner.name, name) for inner, name, _ in roots] == [("work", "f.work")]


def test_events_are_frozen_dataclasses_with_their_source_span() -> None:
    body = """
    def f(t):
        dist.all_reduce(t)
    """
    (event,) = regions_of(body)[0].paths[0].events
    assert isinstance(event, CommEvent)
    assert event.end_line == event.line and event.end_column > event.column


def test_a_match_statement_is_a_choice_among_its_cases() -> None:
    body = """
    def f(t):
        match dist.get_rank():
            case 0:
                dist.barrier()
            case 1:
                dist.all_reduce(t)
    """
    (region,) = regions_of(body)
    # each case, and no case at all (a rank other than 0 and 1)
    assert [ops(p) for p in region.paths] == [("barrier",), ("all_reduce",), ()]
    assert all(is_rank_dependent(p.conds[0]) for p in region.paths)


def test_a_match_ending_in_a_wildcard_case_always_takes_a_case() -> None:
    # `case _:` (or a bare name) matches whatever no earlier case did: there is no path that
    # takes no case, which would issue nothing where every rank issues the all-reduce.
    body = """
    def f(t, flag):
        match dist.get_rank():
            case 0:
                dist.all_reduce(t)
            case _:
                dist.all_reduce(t)
        match flag:
            case 1:
                dist.barrier()
            case other if other:
                dist.barrier()
    """
    (region,) = regions_of(body)
    reduces = {ops(p)[:1] for p in region.paths}
    assert reduces == {("all_reduce",)}
    # a guarded capture may not match: the second statement may still take no case
    assert {ops(p)[1:] for p in region.paths} == {("barrier",), ()}


def test_a_rank_decorator_runs_the_body_on_some_ranks_and_skips_it_on_the_others() -> None:
    body = """
    from lightning.pytorch.utilities import rank_zero_only
    @rank_zero_only
    def f(t):
        dist.barrier()
    """
    (region,) = regions_of(body)
    assert op_sequences(region) == {("barrier",), ()}
    assert all(len(p.conds) == 1 and is_rank_dependent(p.conds[0]) for p in region.paths)


def test_a_break_under_a_rank_test_ends_the_iteration_in_the_loop_region() -> None:
    body = """
    def f(t):
        for x in t:
            if dist.get_rank() == 0:
                break
            dist.all_reduce(x)
    """
    function, loop = regions_of(body)
    assert op_sequences(function) == {("loop[all_reduce]",)}
    exits = sorted((p.exit.kind.value if p.exit else "", ops(p)) for p in loop.paths)
    assert exits == [("", ("all_reduce",)), ("break", ())]


def test_an_outer_loop_communicates_only_when_an_inner_loop_does_and_on_that_loops_groups() -> None:
    # The outer loop's body path issues nothing itself: one of its iterations communicates on
    # `a` only when `sharded` (the inner loop's test), on `b` either way.
    body = """
    def f(states, sharded, a, b):
        for state in states:
            for value in state:
                if sharded:
                    dist.all_reduce(value, group=a)
                dist.barrier(group=b)
    """
    (function, *_) = regions_of(body)
    (path,) = function.paths
    (outer,) = path.events
    assert isinstance(outer, LoopEvent)
    issued = [
        tuple((e.op, e.group.key.split("@")[0] if e.group else "") for e in comms)
        for comms in outer.body_comms
    ]
    tests = [conds[-1] for conds in outer.body_conds]  # after the two loops' `len(...) >= 1`
    assert [len(conds) for conds in outer.body_conds] == [3, 3]
    sharded = tests[0]
    assert isinstance(sharded, Atom) and sharded.name.startswith("param:sharded")
    assert tests == [sharded, Not(sharded)]
    assert issued == [
        (("all_reduce", "param:a"), ("barrier", "param:b")),
        (("barrier", "param:b"),),
    ]
