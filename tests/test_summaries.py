"""Helper summaries (issue 6): a helper's body runs once per distinct call context and the result is
reused at the other call sites and paths, with the same regions, findings and call chains as
running it again at each of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.catalog import load_catalog
from collcheck.config import load_settings
from collcheck.static import inliner
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import build_module
from collcheck.static.program import CommEvent, Region, RegionKind

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def analyse(source: str, function: str = "f", *, summaries: bool = True) -> tuple[list[Region], Interpreter]:
    tree = ast.parse(source)
    module = build_module(tree, "m.py", load_catalog())
    extractor = Interpreter(module)
    extractor.summaries.enabled = summaries
    module.globals.update(extractor.module_environment(tree.body))
    if "." in function:
        class_name, name = function.split(".")
        node = module.classes[class_name].methods[name]
        return extractor.run_function(node, class_name, function), extractor
    return extractor.run_function(module.functions[function], None, function), extractor


def executions(extractor: Interpreter, name: str) -> int:
    return sum(count for node, count in extractor.summaries.executions.items() if node.name == name)


def same_as_inlining(source: str, function: str = "f") -> tuple[list[Region], Interpreter]:
    summarised, extractor = analyse(source, function)
    inlined, _ = analyse(source, function, summaries=False)
    assert summarised == inlined
    return summarised, extractor


HELPER = (
    "import torch.distributed as dist\n"
    "def sync(x, op):\n"
    "    dist.all_reduce(x, op=op)\n"
    "    for _ in range(dist.get_rank()):\n"
    "        dist.broadcast(x, src=0)\n"
)


def test_helper_called_from_many_sites_runs_once_per_distinct_arguments() -> None:
    source = HELPER + (
        "def f(t):\n"
        "    sync(t, 'sum')\n"
        "    if t:\n"
        "        dist.barrier()\n"
        "    sync(t, 'sum')\n"
        "    if t:\n"
        "        sync(t, 'sum')\n"
        "    sync(t, 'max')\n"
        "    sync(t, 'max')\n"
    )
    regions, extractor = same_as_inlining(source)
    # Five call sites, some reached on two paths, two distinct argument values: two runs.
    assert executions(extractor, "sync") == 2
    assert extractor.summaries.reused == 6
    # The loop inside sync is a region per call site, each with the chain of its own call.
    loops = [r for r in regions if r.kind is RegionKind.LOOP]
    call_lines = sorted({e.chain[0].line for r in loops for p in r.paths for e in p.events})
    assert call_lines == [7, 10, 12, 13, 14]
    assert len(loops) == 5


def test_reused_events_carry_the_chain_of_their_own_call_site() -> None:
    source = HELPER + "def f(t):\n    sync(t, 'sum')\n    sync(t, 'sum')\n"
    regions, extractor = same_as_inlining(source)
    assert executions(extractor, "sync") == 1
    reduces = [
        (e.chain[0].line, e.line)
        for p in regions[0].paths
        for e in p.events
        if isinstance(e, CommEvent) and e.op == "all_reduce"
    ]
    assert reduces == [(7, 3), (8, 3)]


def test_a_branch_the_caller_already_decided_is_another_context() -> None:
    # Where the caller's path condition already holds the helper's test (`if rank == 0:` twice),
    # inlining does not fork it: the summary recorded where the test was open does not apply, and
    # one recorded under `rank == 0` does not apply under `rank != 0`.
    source = (
        "import torch.distributed as dist\n"
        "def sync(x):\n"
        "    if dist.get_rank() == 0:\n"
        "        dist.barrier()\n"
        "    dist.all_reduce(x)\n"
        "def f(t):\n"
        "    sync(t)\n"  # open: both arms
        "    if dist.get_rank() == 0:\n"
        "        sync(t)\n"  # decided: rank 0
        "    sync(t)\n"  # decided on each path: rank 0 (reused), not rank 0
    )
    _, extractor = same_as_inlining(source)
    assert executions(extractor, "sync") == 3
    assert extractor.summaries.reused == 1


def test_methods_nested_helpers_and_recursion_match_inlining() -> None:
    source = (
        "import torch.distributed as dist\n"
        "class Trainer:\n"
        "    def __init__(self):\n"
        "        self.rank = dist.get_rank()\n"
        "    def sync(self, t):\n"
        "        if self.rank == 0:\n"
        "            dist.barrier()\n"
        "        self.reduce(t)\n"
        "    def reduce(self, t):\n"
        "        dist.all_reduce(t)\n"
        "        if t:\n"
        "            self.reduce(t)\n"
        "    def step(self, t):\n"
        "        def inner(x):\n"
        "            self.sync(x)\n"
        "            return self.rank\n"
        "        inner(t)\n"
        "        if inner(t) == 0:\n"
        "            self.sync(t)\n"
        "        self.sync(t)\n"
    )
    _, extractor = same_as_inlining(source, "Trainer.step")
    assert extractor.summaries.reused > 0


def test_a_summary_recorded_inside_a_recursion_is_not_reused_outside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Recursion followed one level only, so that the cut is reached within the inlining depth:
    # `h` at depth 3 once under `g` (its call back to `g` is cut: recursion) and once under `c`
    # (where it runs `g`): the same function, depth and arguments, but a different stack.
    monkeypatch.setattr(inliner, "MAX_RECURSION", 1)
    source = (
        "import torch.distributed as dist\n"
        "def g():\n"
        "    dist.barrier()\n"
        "    h()\n"
        "def h():\n"
        "    dist.all_reduce(1)\n"
        "    g()\n"
        "def a():\n"
        "    g()\n"
        "def d():\n"
        "    h()\n"
        "def c():\n"
        "    d()\n"
        "def f():\n"
        "    a()\n"
        "    c()\n"
    )
    regions, extractor = same_as_inlining(source)
    assert [e.op for e in regions[0].paths[0].events] == ["barrier", "all_reduce", "all_reduce", "barrier"]
    assert executions(extractor, "h") == 2


def test_summaries_pass_on_what_a_reused_inner_helper_read() -> None:
    # `outer` is recorded while `inner`'s summary is reused inside it: the branch `inner` decides
    # from the caller's condition must make `outer`'s summary depend on that condition too.
    source = (
        "import torch.distributed as dist\n"
        "def inner():\n"
        "    if dist.get_rank() == 0:\n"
        "        dist.barrier()\n"
        "def outer():\n"
        "    inner()\n"
        "def f():\n"
        "    inner()\n"
        "    if dist.get_rank() == 0:\n"
        "        outer()\n"
        "    outer()\n"
    )
    same_as_inlining(source)


def deep_units() -> list[Path]:
    """The fixtures of `fixtures/deep`: single files, and folders marked by `__fixture__`."""
    folders = sorted(marker.parent for marker in (FIXTURES / "deep").rglob("__fixture__"))
    files = [
        path
        for path in sorted((FIXTURES / "deep").rglob("*.py"))
        if not any(folder in path.parents for folder in folders)
    ]
    return [*files, *folders]


@pytest.mark.parametrize("unit", deep_units(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_findings_and_counterexamples_are_those_of_inlining(
    unit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False)
    summarised = check_paths([unit], settings)
    monkeypatch.setattr(inliner, "_summary_key", lambda *args: None)  # every call runs the helper
    inlined = check_paths([unit], settings)
    assert [repr(f) for f in summarised.findings] == [repr(f) for f in inlined.findings]
    assert [f.notes for f in summarised.files] == [f.notes for f in inlined.files]


def test_recursion_is_followed_a_bounded_number_of_levels_as_with_inlining() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def levels(t, n):\n"
        "    if n == 0:\n"
        "        return\n"
        "    dist.all_reduce(t)\n"
        "    levels(t, n - 1)\n"
        "def f(t):\n"
        "    levels(t, 2)\n"
        "    levels(t, 2)\n"
    )
    regions, _ = same_as_inlining(source, "f")
    # Each call follows `levels` MAX_RECURSION (3) levels deep, the inlining depth allowing:
    # three all_reduces per call at most (one, if recursion were cut at the first re-entry).
    assert max(len(path.events) for path in regions[0].paths) == 2 * inliner.MAX_RECURSION


def _long_step_helper(statements: int) -> str:
    """A helper of `statements` bookkeeping statements around one all_reduce (a step method)."""
    body = "".join(f"    v{i} = x + {i}\n    x = v{i}\n" for i in range(statements // 2))
    return "import torch.distributed as dist\ndef step(x):\n" + body + "    dist.all_reduce(x)\n"


def test_a_replayed_summary_is_charged_what_it_replays_not_the_helper_body(tmp_path: Path) -> None:
    """A 400-statement helper called at 20 sites: charged its body at every site, 8,000 steps, over
    a 5,000-step budget, and the caller went to the reduced mode; a replay rebuilds one final state
    and one event, so the caller now fits and is analysed in full."""
    calls = "".join("    step(t)\n" for _ in range(20))
    guarded = "    if dist.get_rank() == 0:\n        step(t)\n"
    source = _long_step_helper(400) + "def f(t):\n" + calls + guarded
    _, extractor = analyse(source)
    assert executions(extractor, "step") == 1
    assert extractor.summaries.reused == 20
    assert extractor.steps < 1000  # one body run (~400) and 20 replays of 2 steps each
    path = tmp_path / "loop.py"
    path.write_text(source, encoding="utf-8")
    result = check_paths([path], load_settings([path]).with_overrides(jobs=1, cache=False))
    assert not [note for note in result.notes if "reduced mode" in note], result.notes
    assert [f.code for f in result.findings] == ["CC001"]


def test_a_replay_never_costs_more_than_running_the_body_again() -> None:
    """A helper of one statement with several events: a replay is charged at most what its body
    cost when it ran (replaying it cannot push a caller over a budget that running it would not)."""
    source = (
        "import torch.distributed as dist\n"
        "def tiny(x):\n    dist.all_reduce(x); dist.all_reduce(x); dist.all_reduce(x)\n"
        "def f(t):\n" + "".join("    tiny(t)\n" for _ in range(10))
    )
    _, extractor = analyse(source)
    _, inlined = analyse(source, summaries=False)
    assert extractor.summaries.reused == 9
    assert extractor.steps <= inlined.steps
