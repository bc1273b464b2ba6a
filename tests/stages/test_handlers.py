"""Stage `handlers`: `try` statements — which paths enter a handler and under what condition: an
explicit `raise` under its own test, an error one rank can hit alone (a per-process flag), any
other exception taken by every rank together (a flag alike on every rank); then `finally`."""

from __future__ import annotations

from collcheck.static.program import ExitKind, Path
from collcheck.static.symbolic import RANK, Atom, Compare, Const, Not, atoms

from .conftest import ops, regions_of

RANK_ZERO = Compare("==", RANK, Const(0))


def flags(path: Path) -> list[tuple[str, bool]]:
    """The exception flags of a path's conditions: (kind of the flag's atom, taken or not)."""
    found = []
    for cond in path.conds:
        inner = cond.operand if isinstance(cond, Not) else cond
        if isinstance(inner, Atom) and inner.name.startswith("exception@"):
            found.append((inner.kind, not isinstance(cond, Not)))
    return found


def test_an_explicit_raise_enters_the_handler_under_its_own_test() -> None:
    body = """
    class Boom(Exception):
        pass
    def f(t):
        try:
            if dist.get_rank() == 0:
                raise Boom()
            dist.all_reduce(t)
        except Boom:
            dist.barrier()
    """
    paths = regions_of(body)[0].paths
    raised = [p for p in paths if p.conds[:1] == (RANK_ZERO,)]
    assert [ops(p) for p in raised] == [("barrier",)]
    assert all(p.exit is None for p in paths)  # the raise was caught


def test_an_error_one_rank_can_hit_alone_enters_on_a_per_process_flag() -> None:
    body = """
    def f(t, path):
        try:
            data = open(path).read()
        except OSError:
            return
        dist.all_reduce(t)
    """
    handled, normal = regions_of(body)[0].paths
    assert (
        flags(handled) == [("nondet", True)]
        and handled.exit is not None
        and handled.exit.kind is ExitKind.RETURN
    )
    assert ops(normal) == ("all_reduce",)
    (flag,) = [a for c in handled.conds for a in atoms(c)]
    assert flag.why == "an exception"


def test_another_exception_is_taken_by_every_rank_together() -> None:
    body = """
    def f(t):
        try:
            t.fancy()
        except RuntimeError:
            if dist.get_rank() == 0:
                dist.barrier()
        dist.all_reduce(t)
    """
    paths = regions_of(body)[0].paths
    assert {(tuple(flags(p)), ops(p)) for p in paths} == {
        ((("shared", False),), ("all_reduce",)),
        ((("shared", True),), ("barrier", "all_reduce")),
        ((("shared", True),), ("all_reduce",)),
    }


def test_finally_runs_after_the_body() -> None:
    body = """
    def f(t):
        try:
            dist.all_reduce(t)
        finally:
            dist.barrier()
    """
    (path,) = regions_of(body)[0].paths
    assert ops(path) == ("all_reduce", "barrier") and path.conds == ()


def test_a_path_that_leaves_the_body_is_not_lost() -> None:
    body = """
    def f(t):
        try:
            if dist.get_rank() == 0:
                return
            dist.all_reduce(t)
        except OSError:
            pass
    """
    paths = regions_of(body)[0].paths
    left = [p for p in paths if p.exit is not None]
    assert [(p.conds, p.exit.kind) for p in left if p.exit is not None] == [((RANK_ZERO,), ExitKind.RETURN)]
    assert ("all_reduce",) in {ops(p) for p in paths}


def test_a_call_that_may_fail_alone_skips_the_collectives_after_it() -> None:
    # The failed rank goes on from the handler: it skips the barrier the body issues after the
    # launch; the flag is per-process, the paths through the body have it false.
    body = """
    def f(run):
        try:
            run()
            dist.barrier()
        except Exception:
            pass
        dist.all_reduce(t)
    """
    paths = regions_of(body)[0].paths
    assert sorted(ops(p) for p in paths) == [("all_reduce",), ("barrier", "all_reduce")]
    failed = [p for p in paths if ops(p) == ("all_reduce",)]
    assert [flags(p) for p in failed] == [[("nondet", True)]]


def test_collectives_before_any_call_that_may_fail_are_not_skipped() -> None:
    # Only a collective and arithmetic in the body: every rank fails together or none does.
    body = """
    def f(t):
        try:
            dist.all_reduce(t)
            n = len(t)
        except Exception:
            n = 0
        dist.barrier()
    """
    paths = regions_of(body)[0].paths
    assert all(flags(p) == [] or all(kind == "shared" for kind, _ in flags(p)) for p in paths)


def test_a_failure_caught_where_the_body_breaks_keeps_the_failed_rank_in_the_loop() -> None:
    body = """
    def f(writer):
        for _ in range(3):
            try:
                writer.write()
                break
            except Exception:
                pass
            dist.barrier()
    """
    regions = regions_of(body)
    assert any(flags(p) == [("nondet", True)] for region in regions for p in region.paths)


def test_a_recorded_failure_read_by_the_finally_marks_the_raise_after_it() -> None:
    # The handler records the failure and raises again; the `finally` reads the record: the raise
    # that ends the failed rank's path is marked, so that the solver compares it.
    body = """
    def f(writer):
        failed = False
        try:
            writer.write()
        except Exception:
            failed = True
            raise
        finally:
            if not failed:
                dist.barrier()
    """
    paths = regions_of(body)[0].paths
    raised = [p for p in paths if p.exit is not None and p.exit.kind is ExitKind.RAISE]
    assert [(ops(p), p.exit.after_recorded_failure, flags(p)) for p in raised if p.exit] == [
        ((), True, [("nondet", True)])
    ]


def test_a_recorded_failure_read_after_the_try_is_per_process() -> None:
    body = """
    def f(cache, t):
        ok = True
        try:
            open(cache).read()
        except Exception:
            ok = False
        if ok:
            dist.all_reduce(t)
    """
    paths = regions_of(body)[0].paths
    assert sorted(ops(p) for p in paths) == [(), ("all_reduce",)]
    assert [flags(p) for p in paths if not ops(p)] == [[("nondet", True)]]


def test_a_failure_only_a_rank_guarded_block_can_have_is_entered_on_those_ranks() -> None:
    # The only write is under `if rank == 0:`: the flag of the failure comes with that test.
    body = """
    def f(out):
        failed = False
        try:
            if dist.get_rank() == 0:
                open(out, "w").write("x")
        except Exception:
            failed = True
            raise
        finally:
            if not failed:
                dist.barrier()
    """
    paths = regions_of(body)[0].paths
    raised = [p for p in paths if p.exit is not None and p.exit.after_recorded_failure]
    assert len(raised) == 1 and RANK_ZERO in raised[0].conds


def test_in_an_inlined_helper_only_collectives_after_the_call_count() -> None:
    # `g` is run inside `f`: its barrier comes before the call that may fail, so a failure skips
    # nothing (its events are placed by their lines in `g`, not by `g`'s call in `f`).
    body = """
    def g(run):
        try:
            dist.barrier()
            run()
        except Exception:
            pass
    def f(run, t):
        g(run)
        dist.all_reduce(t)
    """
    paths = regions_of(body)[0].paths
    assert all(flags(p) == [] for p in paths)


def test_reading_the_clock_does_not_fail() -> None:
    body = """
    import time
    def f(t):
        try:
            start = time.time()
            dist.all_reduce(t)
        except Exception:
            start = 0
        dist.barrier()
    """
    paths = regions_of(body)[0].paths
    assert all(flags(p) == [] for p in paths)


def test_a_failure_recorded_only_to_be_raised_again_is_not_followed() -> None:
    # `error` is read only to raise it: the failed rank stops as with an uncaught exception.
    body = """
    def f(path):
        error = None
        try:
            open(path).read()
        except OSError as err:
            error = err
        if error is not None:
            raise error
        dist.barrier()
    """
    paths = regions_of(body)[0].paths
    assert all(flags(p) == [] for p in paths)
