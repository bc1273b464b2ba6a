"""Unit tests of the stages: taint (extraction), path enumeration, and the z3 encoding."""

from __future__ import annotations

import ast

import z3

from collcheck.catalog import load_catalog
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import build_module
from collcheck.static.program import Region, RegionKind
from collcheck.static.symbolic import RANK, BinOp, Compare, Const, Z3Translator, is_rank_dependent


def regions(source: str, function: str = "f") -> list[Region]:
    tree = ast.parse(source)
    module = build_module(tree, "m.py", load_catalog())
    return Interpreter(module).run_function(module.functions[function], None, function)


def test_rank_taint_flows_through_assignment_unpacking_and_arithmetic() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def f(x):\n"
        "    r, w = dist.get_rank(), dist.get_world_size()\n"
        "    leader = (r + 1) % w == 1\n"
        "    if leader:\n"
        "        dist.barrier()\n"
    )
    paths = regions(source)[0].paths
    assert len(paths) == 2
    assert all(is_rank_dependent(c) for p in paths for c in p.conds)


def test_uniform_branches_merge_and_do_not_multiply_paths() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def f(x, flag):\n"
        "    if flag:\n        y = 1\n    else:\n        y = 2\n"
        "    if dist.get_rank() == 0:\n        z = 3\n"
        "    dist.all_reduce(x)\n"
    )
    paths = regions(source)[0].paths
    assert len(paths) == 1 and [e.op for e in paths[0].events] == ["all_reduce"]


def test_broadcast_output_is_uniform_again() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def f(flag):\n"
        "    flag = dist.get_rank() == 0\n"
        "    dist.broadcast(flag, 0)\n"
        "    if flag:\n        dist.barrier()\n"
    )
    paths = regions(source)[0].paths
    assert not any(is_rank_dependent(c) for p in paths for c in p.conds)


def test_loop_with_rank_dependent_trip_count_becomes_one_loop_element_and_a_region() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def f(x):\n    for i in range(dist.get_rank()):\n        dist.all_reduce(x)\n"
    )
    found = regions(source)
    assert [r.kind for r in found] == [RegionKind.FUNCTION, RegionKind.LOOP]
    (loop,) = found[0].paths[0].events
    assert loop.op == "loop[all_reduce]" and is_rank_dependent(loop.trip)  # type: ignore[union-attr]


def test_z3_encoding_two_rank_instances_share_uniform_values() -> None:
    tr = Z3Translator(z3)
    world_minus_one = BinOp("-", RANK, Const(1))
    solver = z3.Solver()
    solver.add(
        tr.as_bool(Compare("==", RANK, Const(0)), "a"),
        tr.as_bool(Compare("==", world_minus_one, Const(0)), "b"),
    )
    solver.add(tr.rank("a") != tr.rank("b"))
    assert solver.check() == z3.sat
    model = solver.model()
    assert model.eval(tr.rank("a")).as_long() == 0 and model.eval(tr.rank("b")).as_long() == 1


def test_z3_truthiness_of_arithmetic_is_non_zero() -> None:
    tr = Z3Translator(z3)
    solver = z3.Solver()
    solver.add(tr.as_bool(BinOp("%", RANK, Const(2)), "a"), tr.rank("a") == 2)
    assert solver.check() == z3.unsat


def test_a_literal_range_of_ranks_is_its_values_and_a_zero_step_is_no_error() -> None:
    from collcheck.api import analyze_text

    found = analyze_text(
        "import torch.distributed as dist\n"
        "TRAINERS = list(range(2))\n"
        "def f():\n"
        "    if dist.get_rank() in TRAINERS:\n"
        "        dist.barrier()\n"
        "def g():\n"
        "    if dist.get_rank() in list(range(0, 8, 0)):\n"
        "        dist.barrier()\n"
    )
    assert found.error is None
    assert {(f.code, f.location.line) for f in found.findings} == {("CC001", 5), ("CC001", 8)}


def _launched(source: str, with_text: bool = True) -> dict[str, str]:
    from collcheck.static.launchers import launched_functions

    tree = ast.parse(source)
    module = build_module(tree, "m.py", load_catalog())
    found = launched_functions(
        tree, module.imports, module.functions, load_catalog().launchers, source if with_text else None
    )
    return {function.name: value for function, value in found.items()}


def test_launched_functions_are_those_handed_to_a_catalogued_launcher() -> None:
    spawned = (
        "import torch.multiprocessing as mp\n"
        "def train(gpu, cfg): pass\n"
        "def main(): mp.spawn(train, nprocs=2)\n"
    )
    assert _launched(spawned) == {"train": "local_rank"}
    assert _launched(spawned, with_text=False) == {"train": "local_rank"}
    through_torch = (
        "import torch\ndef run(i): pass\ntorch.multiprocessing.start_processes(fn=run, nprocs=2)\n"
    )
    assert _launched(through_torch) == {"run": "local_rank"}
    # Another library's `spawn`, and a function only called directly, are not launched.
    assert _launched("import pexpect\ndef train(gpu): pass\npexpect.spawn(train)\n") == {}
    assert _launched("import torch.multiprocessing as mp\ndef train(gpu): pass\ntrain(0)\n") == {}


def test_a_launched_functions_first_parameter_is_the_local_rank() -> None:
    source = (
        "import torch.distributed as dist\nimport torch.multiprocessing as mp\n"
        "def f(gpu, step):\n"
        "    if gpu == 0:\n        dist.barrier()\n"
        "    if step == 0:\n        dist.barrier()\n"
        "mp.spawn(f, nprocs=2)\n"
    )
    conds = [c for path in regions(source)[0].paths for c in path.conds]
    rank_conds = [c for c in conds if is_rank_dependent(c)]
    assert rank_conds and all("gpu" not in str(c) for c in rank_conds)
    assert any(not is_rank_dependent(c) for c in conds)  # `step` stays the caller's value


def test_a_launched_parameter_named_as_a_rank_keeps_its_catalogued_meaning() -> None:
    # `mp.spawn(run)` with `def run(rank, ...)` passed on to init_process_group(rank=rank): the
    # code says it is the global rank (single node), not only the index on the node.
    source = (
        "import torch.distributed as dist\nimport torch.multiprocessing as mp\n"
        "def f(rank):\n"
        "    if rank == 0:\n        dist.barrier()\n"
        "mp.spawn(f, nprocs=2)\n"
    )
    conds = [c for path in regions(source)[0].paths for c in path.conds]
    assert any(c == Compare("==", RANK, Const(0)) for c in conds)
    assert not any("local_world" in str(c) for c in conds)
