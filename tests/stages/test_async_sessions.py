"""Stage `async_sessions` (with `session_values`, the context-free values it reads): the
`SessionRace`s of a snippet, and the `GroupKey`s two group expressions resolve to.

Driven through `session_races(tree, imports, catalog)` and `SessionModel`; the rule's words are
tested by the CC009 fixtures (tests/test_fixtures.py)."""

from __future__ import annotations

import ast
import textwrap

from collcheck.catalog import CatalogError, load_catalog
from collcheck.static.async_sessions import RaceKind, SessionRace, session_races
from collcheck.static.names import module_imports
from collcheck.static.session_values import (
    DEFAULT_GROUP,
    GroupKind,
    Obj,
    SessionModel,
    branch_test,
    other_than,
    runs_once_at_least,
)

from .conftest import catalog

PREAMBLE = "import torch.distributed as dist\nimport torch.distributed.checkpoint as dcp\n"


def _tree(body: str) -> ast.Module:
    return ast.parse(PREAMBLE + textwrap.dedent(body))


def races(body: str) -> list[SessionRace]:
    tree = _tree(body)
    return list(session_races(tree, module_imports(tree), catalog()))


def lines(body: str) -> list[tuple[RaceKind, int, int]]:
    """(kind, session line, racing line), lines counted in `body` (the preamble's two left out)."""
    return sorted((r.kind, r.session.line - 2, r.racing.line - 2) for r in races(body))


def test_barrier_on_the_default_group_before_the_wait() -> None:
    body = """
    def save(state, path):
        fut = dcp.async_save(state, checkpoint_id=path)
        dist.barrier()
        fut.result()
    """
    (race,) = races(body)
    assert race.kind is RaceKind.COLLECTIVE
    assert (race.session.line - 2, race.racing.line - 2) == (3, 4)
    assert (race.group, race.session_group, race.racing.function) == ("", "", "save")


def test_waited_first_or_another_group_is_quiet() -> None:
    waited = """
    def save(state, path):
        fut = dcp.async_save(state, checkpoint_id=path)
        fut.result()
        dist.barrier()
    """
    other_group = """
    def save(state, path):
        group = dist.new_group(backend="gloo")
        fut = dcp.async_save(state, checkpoint_id=path, process_group=group)
        dist.barrier()
        fut.result()
    """
    assert races(waited) == []
    assert races(other_group) == []


def test_quiet_keywords_and_unknown_groups() -> None:
    body = """
    def save(state, path, make_group):
        fut = dcp.async_save(state, checkpoint_id=path, use_collectives=False)
        dist.barrier()
        other = dcp.async_save(state, checkpoint_id=path, process_group=make_group())
        dist.barrier(group=make_group())
        fut.result()
        other.result()
    """
    assert races(body) == []


def test_one_variable_names_one_group_until_reassigned() -> None:
    same = """
    def save(state, path, group):
        fut = dcp.async_save(state, checkpoint_id=path, process_group=group)
        dist.all_reduce(state["loss"], group=group)
        fut.result()
    """
    reassigned = """
    def save(state, path, make_group):
        group = make_group()
        fut = dcp.async_save(state, checkpoint_id=path, process_group=group)
        group = make_group()
        dist.all_reduce(state["loss"], group=group)
        fut.result()
    """
    assert lines(same) == [(RaceKind.COLLECTIVE, 3, 4)]
    assert races(reassigned) == []


def test_future_on_self_waited_by_another_method() -> None:
    body = """
    class Saver:
        def __init__(self):
            self.pending = None

        def start(self, state, path):
            self.pending = dcp.async_save(state, checkpoint_id=path)

        def finish(self):
            if self.pending is not None:
                self.pending.result()

        def waits(self, state, path):
            self.start(state, path)
            self.finish()
            dist.barrier()

        def races(self, state, path):
            self.start(state, path)
            dist.barrier()
    """
    assert lines(body) == [(RaceKind.COLLECTIVE, 7, 20)]


def test_handle_handed_to_unknown_code_is_no_longer_followed() -> None:
    body = """
    def save(state, path, queue):
        fut = dcp.async_save(state, checkpoint_id=path)
        queue.put(fut)
        dist.barrier()
    """
    assert races(body) == []


def test_second_session_and_the_next_iteration() -> None:
    body = """
    def save_all(parts, group):
        for part in parts:
            fut = dcp.async_save(part, checkpoint_id="x", process_group=group)
    """
    assert lines(body) == [(RaceKind.SECOND_SESSION, 4, 4)]


def test_none_branch_closes_the_session() -> None:
    body = """
    def loop(batches, state, group):
        fut = None
        for batch in batches:
            if fut is not None:
                fut.result()
            dist.all_reduce(batch, group=group)
            fut = dcp.async_save(state, checkpoint_id="x", process_group=group)
    """
    assert races(body) == []


def test_upload_completion_ends_the_session_staging_does_not() -> None:
    body = """
    def staged(state, path):
        response = dcp.async_save(state, checkpoint_id=path)
        response.staging_completion.result()
        dist.barrier()

    def uploaded(state, path):
        response = dcp.async_save(state, checkpoint_id=path)
        response.upload_completion.result()
        dist.barrier()
    """
    assert lines(body) == [(RaceKind.COLLECTIVE, 3, 5)]


def test_group_keys_of_factories_and_constructors() -> None:
    tree = _tree(
        """
        _G = None

        def side():
            global _G
            if _G is None:
                _G = dist.new_group(backend="gloo")
            return _G

        class Box:
            def __init__(self, group=None):
                self.group = group
                self.side = side()
                self.fresh = dist.new_group()

        def build():
            return Box()
        """
    )
    model = SessionModel(tree, module_imports(tree), catalog())
    box = Obj("box", "Box", exact=True)
    assert model.factories["side"].kind is GroupKind.NAMED
    assert model.attribute(box, "group") is not None
    assert model.attribute(box, "group").group == DEFAULT_GROUP  # type: ignore[union-attr]
    assert model.attribute(box, "side").group == model.factories["side"]  # type: ignore[union-attr]
    fresh = model.attribute(box, "fresh")
    assert fresh is not None and fresh.group.kind is GroupKind.FRESH
    assert not fresh.group.same(model.attribute(Obj("other", "Box", exact=True), "fresh").group)  # type: ignore[union-attr]


def test_a_malformed_session_entry_is_a_catalog_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[async_session]]\nnames = ["pkg.start"]\nends = ["not a name"]\n', encoding="utf-8")
    try:
        load_catalog([bad])
    except CatalogError as error:
        assert "ends" in str(error)
    else:
        raise AssertionError("a session entry without valid ends was accepted")


def test_a_followed_call_keeps_the_defaults_it_does_not_pass() -> None:
    body = """
    def start(state, path, group=None):
        return dcp.async_save(state, checkpoint_id=path, process_group=group)

    def run(state, path, group):
        fut = start(state, path)
        dist.barrier()
        fut.result()
        other = start(state, path, group=dist.new_group(backend="gloo"))
        dist.barrier()
        other.result()
    """
    assert lines(body) == [(RaceKind.COLLECTIVE, 3, 7)]


def test_bounded_on_hostile_input() -> None:
    """Deep nesting and many loops end (the step bounds), with whatever was found before."""
    nested = "def deep(state):\n    fut = dcp.async_save(state, checkpoint_id='x')\n    v = 1" + " + 1" * 900
    loops = "".join(f"{'    ' * (i + 1)}for x{i} in range(3):\n" for i in range(19))
    innermost = "    " * 20 + "dist.barrier(dcp.async_save(state, checkpoint_id='x'))\n"
    many = "def loops(state):\n" + loops + innermost
    for body in (nested, many):
        tree = ast.parse(PREAMBLE + body)
        assert isinstance(session_races(tree, module_imports(tree), catalog()), tuple)


def test_a_finally_runs_before_the_return_it_guards() -> None:
    body = """
    def save(state, compute):
        fut = dcp.async_save(state, checkpoint_id="x")
        try:
            return compute()
        finally:
            fut.result()

    def caller(state, compute):
        value = save(state, compute)
        dist.barrier()
        return value
    """
    assert races(body) == []


def test_a_group_filled_lazily_by_a_method_is_one_group() -> None:
    body = """
    class Trainer:
        def __init__(self):
            self._side = None

        def side(self):
            if self._side is None:
                self._side = dist.new_group(backend="gloo")
            return self._side

        def step(self, state, batch):
            fut = dcp.async_save(state, checkpoint_id="x", process_group=self.side())
            dist.all_reduce(batch, group=self.side())
            fut.result()

        def fresh_each_time(self, state, batch):
            fut = dcp.async_save(state, checkpoint_id="x", process_group=dist.new_group(backend="gloo"))
            dist.all_reduce(batch, group=dist.new_group(backend="gloo"))
            fut.result()
    """
    assert lines(body) == [(RaceKind.COLLECTIVE, 12, 13)]


def test_an_object_holding_a_handle_handed_to_unknown_code_is_no_longer_followed() -> None:
    body = """
    class Saver:
        def __init__(self):
            self.job = None

        def start(self, state):
            self.job = dcp.async_save(state, checkpoint_id="x")

    def handed(saver: Saver, state, hooks):
        saver.start(state)
        hooks.on_save(saver)
        dist.barrier()

    def kept(saver: Saver, state, hooks):
        saver.start(state)
        hooks.on_save(state)
        dist.barrier()
    """
    assert lines(body) == [(RaceKind.COLLECTIVE, 7, 17)]


def test_a_branch_condition_is_forgotten_once_its_place_is_stored() -> None:
    """A save started under `flag` is not open where `flag` failed, until `flag` is stored again."""
    same_flag = """
    def save(state, path, flag):
        if flag:
            fut = dcp.async_save(state, checkpoint_id=path)
        if not flag:
            dist.barrier()
        if flag:
            fut.result()
    """
    restored = """
    def save(state, path, flag, other):
        if flag:
            fut = dcp.async_save(state, checkpoint_id=path)
        flag = other
        if not flag:
            dist.barrier()
        if flag:
            fut.result()
    """
    assert lines(same_flag) == []
    assert lines(restored) == [(RaceKind.COLLECTIVE, 4, 7)]


def test_a_handler_starts_before_each_statement_but_after_a_plain_wait() -> None:
    def body(wait: str) -> str:
        return f"""
        def save(state, path, log):
            fut = dcp.async_save(state, checkpoint_id=path)
            try:
                {wait}
            except Exception:
                log()
            dist.barrier()
        """

    assert lines(body("fut.result()")) == []
    assert lines(body("fut.result(timeout=5)")) == [(RaceKind.COLLECTIVE, 3, 8)]


def test_branch_tests_loop_trips_and_quiet_keywords_read_from_syntax() -> None:
    def test_of(text: str) -> tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]] | None:
        found = branch_test(ast.parse(text, mode="eval").body)
        return None if found is None else (found.on_then, found.on_else)

    assert test_of("mode") == ((("", True),), (("", False),))
    assert test_of("mode is not Mode.A") == ((("== Mode.A", False),), (("== Mode.A", True),))
    assert test_of("mode in (Mode.A, Mode.B)") == ((), (("== Mode.A", False), ("== Mode.B", False)))
    assert test_of("mode not in [1]") == ((("== 1", False),), (("== 1", True),))
    assert test_of("mode < 3") is None and test_of("f() == 1") is None and test_of("m in xs") is None

    def loop(text: str) -> bool:
        node = ast.parse(text).body[0]
        assert isinstance(node, (ast.For, ast.While))
        return runs_once_at_least(node)

    assert (
        loop("for i in range(3): pass") and loop("for i in range(1, 2): pass") and loop("for i in [0]: pass")
    )
    for never_sure in ("range(0)", "range(2, 2)", "range(n)", "range(True)", "[]", "[*xs]", "range(0, 9, 2)"):
        assert not loop(f"for i in {never_sure}: pass"), never_sure
    assert not loop("while True: pass")

    def other(text: str) -> bool:
        return other_than(ast.parse(text, mode="eval").body, "AsyncCheckpointerType.PROCESS")

    assert (
        other("AsyncCheckpointerType.THREAD") and other("dcp.AsyncCheckpointerType.THREAD") and other("None")
    )
    assert not other("AsyncCheckpointerType.PROCESS") and not other("kind") and not other("cfg.kind")
