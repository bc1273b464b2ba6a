"""bench/inject_bugs.py, the injected-bug recall harness: its site finder, its mutations, its
archive unpacking, and one whole run on a tiny local corpus made of fixtures' fixed twins."""

from __future__ import annotations

import ast
import io
import json
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import corpus  # noqa: E402
import inject_bugs as ib  # noqa: E402

SOURCE = '''"""A module."""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed import barrier as sync
from accelerate.utils import gather
from deepspeed import comm as ds


def direct(x, g):
    dist.all_reduce(x)
    dist.broadcast(x, 0, g)
    y = dist.all_gather_object([None], x, group=None)
    if x:
        sync()
    if x: dist.barrier()
    print(dist.barrier())
    return y


def wrappers(accelerator, x, g):
    out = gather(x)
    accelerator.wait_for_everyone()
    ds.all_reduce(x, group=g)
    return out


class MyStrategy:
    def barrier(self):
        self.barrier()

    def other(self, trainer):
        trainer.strategy.barrier("name")
        self.broadcast(1)

        def inner():
            dist.barrier()

        return inner
'''


def sites_by_line(text: str = SOURCE, path: str = "pkg/mod.py") -> dict[int, ib.Site]:
    return {site.line: site for site in ib.find_sites("pkg", path, text).sites}


def line_of(fragment: str, text: str = SOURCE) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_sites_are_found_and_classified() -> None:
    sites = sites_by_line()
    expected = {  # fragment -> (wrapper, group)
        "dist.all_reduce(x)": (False, None),
        "dist.broadcast(x, 0, g)": (False, "g"),
        "y = dist.all_gather_object": (False, None),  # group=None is no group
        "sync()": (False, None),  # an imported name
        "out = gather(x)": (True, None),
        "accelerator.wait_for_everyone()": (True, None),
        "ds.all_reduce(x, group=g)": (True, "g"),
        "        self.barrier()": (True, None),  # inside a class named ...Strategy
        'trainer.strategy.barrier("name")': (True, None),
        "self.broadcast(1)": (True, None),
        "            dist.barrier()": (False, None),
    }
    for fragment, (wrapper, group) in expected.items():
        site = sites[line_of(fragment)]
        assert (site.wrapper, site.group) == (wrapper, group), fragment
    # Not statements of their own, or not a statement's value: never sites.
    assert line_of("if x: dist.barrier()") not in sites
    assert line_of("print(dist.barrier())") not in sites
    assert len(sites) == len(expected)


def test_nested_function_sites_are_judged_in_the_outermost_function() -> None:
    site = sites_by_line()[line_of("            dist.barrier()")]
    assert site.function == "MyStrategy.other.inner"
    assert site.function_line == line_of("def other(")
    assert site.inner_line == line_of("def inner(")


def test_adjacent_different_collectives_pair_up() -> None:
    pairs = ib.find_sites("pkg", "pkg/mod.py", SOURCE).pairs
    assert [(pair.first.line, pair.second.line) for pair in pairs] == [
        (line_of("dist.all_reduce(x)"), line_of("dist.broadcast(x, 0, g)")),
        (line_of("dist.broadcast(x, 0, g)"), line_of("y = dist.all_gather_object")),
        (line_of("out = gather(x)"), line_of("accelerator.wait_for_everyone()")),
        (line_of("accelerator.wait_for_everyone()"), line_of("ds.all_reduce(x, group=g)")),
        (line_of('trainer.strategy.barrier("name")'), line_of("self.broadcast(1)")),
    ]


def test_statements_under_a_rank_condition_are_left_out() -> None:
    text = (
        "import torch.distributed as dist\n\n"
        "def f(x, accelerator, n):\n"
        "    if dist.get_rank() == 0:\n        dist.send(x, 1)\n    else:\n        dist.recv(x, 0)\n"
        "    if accelerator.is_main_process:\n        for i in range(n):\n            dist.barrier()\n"
        "    for i in range(n):\n        dist.broadcast(x, 0)\n"
    )
    found = ib.find_sites("pkg", "pkg/m.py", text)
    assert [site.call for site in found.sites] == ["dist.broadcast"]
    assert sorted(site.call for site in found.rank_dependent) == ["dist.barrier", "dist.recv", "dist.send"]


def test_swaps_of_two_different_groups_are_not_pairs() -> None:
    # Two groups that may share one rank only (two axes of a grid): either order completes.
    text = (
        "import torch.distributed as dist\n\n"
        "def f(x, pp, dp):\n"
        "    dist.broadcast(x, 0, group=pp)\n    dist.all_reduce(x, group=dp)\n"
        "    dist.all_gather_object([None], x, group=dp)\n    dist.barrier()\n"
    )
    pairs = ib.find_sites("pkg", "pkg/m.py", text).pairs
    assert [(pair.first.call, pair.second.call) for pair in pairs] == [
        ("dist.all_reduce", "dist.all_gather_object"),  # the same group
        ("dist.all_gather_object", "dist.barrier"),  # a group and the world
    ]


def test_functions_defined_under_a_rank_condition_are_rank_conditional() -> None:
    text = (
        "import torch.distributed as dist\n\n"
        "def search(trainer, study, n):\n"
        "    if trainer.args.process_index == 0:\n"
        "        def objective(trial):\n            dist.broadcast_object_list([trial], src=0)\n"
        "        study.optimize(objective)\n"
        "    def later(x):\n        dist.barrier()\n"
        "    return later\n"
    )
    found = ib.find_sites("pkg", "pkg/m.py", text)
    assert [site.function for site in found.sites] == ["search.later"]
    assert [site.function for site in found.rank_dependent] == ["search.objective"]


def test_megatron_mappings_take_their_group_positionally() -> None:
    text = (
        "from megatron.core.tensor_parallel import all_to_all\n"
        "from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region as r\n\n"
        "def f(x, g):\n    y = r(x, g)\n    z = all_to_all(g, x)\n    w = r(x)\n"
    )
    assert [site.group for site in ib.find_sites("megatron", "megatron/m.py", text).sites] == ["g", "g", None]


def test_sites_say_when_they_are_in_an_except_handler_or_use_a_local_import() -> None:
    text = (
        "import torch\n\ndef f(x):\n    import torch.distributed as dist\n    dist.barrier()\n"
        "    try:\n        pass\n    except RuntimeError:\n        torch.distributed.barrier()\n"
    )
    contexts = [site.context for site in ib.find_sites("pkg", "pkg/m.py", text).sites]
    assert contexts == ["callee imported inside the function", "in an except handler"]


def test_two_calls_of_the_same_collective_are_not_a_pair() -> None:
    text = (
        "import torch.distributed as dist\n\ndef f(a, b):\n    dist.all_reduce(a)\n    dist.all_reduce(b)\n"
    )
    assert ib.find_sites("pkg", "pkg/m.py", text).pairs == []


def test_relative_imports_resolve_against_the_module() -> None:
    text = "from ..utils import gather\n\ndef f(x):\n    gather(x)\n"
    assert ib.find_sites("accelerate", "accelerate/sub/mod.py", text).sites[0].wrapper
    assert ib.find_sites("other", "other/sub/mod.py", text).sites == []  # other.utils.gather is no wrapper


def mutated(kind: ib.Kind, fragment: str, text: str = SOURCE, partner: str | None = None) -> ib.Mutant:
    sites = sites_by_line(text)
    other = sites[line_of(partner, text)] if partner else None
    mutant = ib.mutate(kind, sites[line_of(fragment, text)], text, other)
    assert mutant is not None
    ast.parse(mutant.text)
    return mutant


def test_each_kind_writes_its_rank_dependent_code_at_the_statement() -> None:
    rank, group_rank = "torch.distributed.get_rank()", "torch.distributed.get_rank(group=g)"
    expected = {
        ib.Kind.RANK_GUARD: [f"    if {rank} == 0:", "        dist.broadcast(x, 0, g)"],
        ib.Kind.EARLY_RETURN: [f"    if {rank} == 1:", "        return", "    dist.broadcast(x, 0, g)"],
        ib.Kind.RANK_LOOP: [f"    for _cc_i in range({rank} + 1):", "        dist.broadcast(x, 0, g)"],
        ib.Kind.RAISE_ON_RANK: [f"    if {rank} == 1:", '        raise RuntimeError("injected")'],
        ib.Kind.RANK_GUARD_GROUP: [f"    if {group_rank} == 0:", "        dist.broadcast(x, 0, g)"],
        ib.Kind.EARLY_RETURN_GROUP: [f"    if {group_rank} == 1:", "        return"],
        ib.Kind.RANK_LOOP_GROUP: [f"    for _cc_i in range({group_rank} + 1):"],
        ib.Kind.HELPER_GUARD: [f"    if _cc_first_of({rank}):", "        dist.broadcast(x, 0, g)"],
        ib.Kind.HELPER_LOOP: [
            f"    for _cc_i in range(_cc_share_of({rank})):",
            "        dist.broadcast(x, 0, g)",
        ],
    }
    for kind, lines in expected.items():
        mutant = mutated(kind, "dist.broadcast(x, 0, g)")
        new = mutant.text.splitlines()
        start = new.index(lines[0])
        assert new[start : start + len(lines)] == lines, kind
        # `direct` (lines 11-19) moved down by the added import and grew by the added lines
        added = 2 if kind in (ib.Kind.EARLY_RETURN, ib.Kind.EARLY_RETURN_GROUP, ib.Kind.RAISE_ON_RANK) else 1
        assert (mutant.function_line, mutant.function_end) == (12, 19 + 1 + added), kind


def test_helper_kinds_append_a_helper_that_is_handed_the_rank() -> None:
    for kind in (ib.Kind.HELPER_GUARD, ib.Kind.HELPER_LOOP):
        text = mutated(kind, "dist.broadcast(x, 0, g)").text
        definition = ib.HELPERS[kind][0]
        assert definition in text.splitlines()
        # appended after the last line of the module: no function of it moves
        assert text.index(definition) > text.index("return inner")
        parameters = definition.split("(", 1)[1]
        assert "rank" not in parameters  # only data flow links the helper to the rank


@pytest.mark.parametrize("kind", [ib.Kind.HELPER_GUARD, ib.Kind.HELPER_LOOP])
def test_collcheck_finds_the_rank_reaching_the_collective_through_the_helper(
    kind: ib.Kind, tmp_path: Path
) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from cli_support import fixture_run

    text = "import torch.distributed as dist\n\n\ndef step(x):\n    dist.all_reduce(x)\n    dist.barrier()\n"
    mutant = mutated(kind, "dist.all_reduce(x)", text)
    target = tmp_path / "mutant.py"
    target.write_text(mutant.text)
    result = fixture_run(target)
    assert not result.errors
    lines = {finding.location.line for finding in result.findings}
    expected = {ib.Kind.HELPER_GUARD: "CC001", ib.Kind.HELPER_LOOP: "CC002"}[kind]
    assert [f.code for f in result.findings] == [expected]
    assert all(mutant.function_line <= line <= mutant.function_end for line in lines)


def test_object_kinds_reach_the_collective_through_an_object() -> None:
    method = mutated(ib.Kind.OBJECT_METHOD, "y = dist.all_gather_object").text.splitlines()
    start = method.index("    _cc_relay = _CcRelay()")
    assert method[start : start + 3] == [
        "    _cc_relay = _CcRelay()",
        "    if torch.distributed.get_rank() == 0:",
        "        y = _cc_relay.run(x)",
    ]
    assert method[-3:] == [
        "class _CcRelay:  # injected",
        "    def run(_cc_self, x):",
        "        return dist.all_gather_object([None], x, group=None)",
    ]
    parameter = mutated(ib.Kind.OBJECT_PARAMETER, "dist.broadcast(x, 0, g)").text.splitlines()
    assert "        _cc_through(_CcRelay(), x, g)" in parameter
    assert parameter[-2:] == [
        "def _cc_through(relay: _CcRelay, x, g):  # injected",
        "    return relay.run(x, g)",
    ]
    gate = mutated(ib.Kind.INIT_ATTRIBUTE_GUARD, "dist.broadcast(x, 0, g)").text.splitlines()
    start = gate.index("    _cc_gate = _CcGate(torch.distributed.get_rank())")
    assert gate[start + 1 : start + 3] == ["    if _cc_gate.stage == 0:", "        dist.broadcast(x, 0, g)"]
    assert gate[-3:] == [
        "class _CcGate:  # injected",
        "    def __init__(self, stage):",
        "        self.stage = stage",
    ]
    # The mutated function grows only by the lines added at the statement.
    mutant = mutated(ib.Kind.OBJECT_METHOD, "y = dist.all_gather_object")
    assert (mutant.function_line, mutant.function_end) == (12, 19 + 1 + 2)


def test_calls_that_read_self_are_not_moved_into_an_object() -> None:
    site = sites_by_line()[line_of("        self.barrier()")]
    assert ib.mutate(ib.Kind.OBJECT_METHOD, site, SOURCE) is None
    assert ib.mutate(ib.Kind.OBJECT_PARAMETER, site, SOURCE) is None
    assert ib.mutate(ib.Kind.INIT_ATTRIBUTE_GUARD, site, SOURCE) is not None  # the call stays


@pytest.mark.parametrize("kind", ib.OBJECT_KINDS, ids=lambda kind: kind.value)
@pytest.mark.parametrize("fragment", ["y = dist.all_gather_object", "out = gather(x)"])
def test_object_mutants_are_found_in_the_mutated_function(
    tmp_path: Path, kind: ib.Kind, fragment: str
) -> None:
    from cli_support import fixture_run

    mutant = mutated(kind, fragment)
    path = tmp_path / "mod.py"
    path.write_text(mutant.text, encoding="utf-8")
    lines = [f.location.line for f in fixture_run(path).findings if f.code == "CC001"]
    assert any(mutant.function_line <= line <= mutant.function_end for line in lines), lines


def test_swap_issues_the_two_statements_in_opposite_orders_on_rank_zero_and_the_rest() -> None:
    mutant = mutated(ib.Kind.SWAP, "dist.all_reduce(x)", partner="dist.broadcast(x, 0, g)")
    new = mutant.text.splitlines()
    start = new.index("    if torch.distributed.get_rank() == 0:")
    assert new[start : start + 6] == [
        "    if torch.distributed.get_rank() == 0:",
        "        dist.all_reduce(x)",
        "        dist.broadcast(x, 0, g)",
        "    else:",
        "        dist.broadcast(x, 0, g)",
        "        dist.all_reduce(x)",
    ]


def test_the_import_goes_after_docstring_and_future_imports_only_when_torch_is_not_bound() -> None:
    new = mutated(ib.Kind.RANK_GUARD, "dist.all_reduce(x)").text.splitlines()
    assert new[new.index("from __future__ import annotations") + 1] == "import torch.distributed  # injected"
    bound = "import torch\n\ndef f(x):\n    torch.distributed.barrier()\n"
    assert "injected" not in mutated(ib.Kind.RANK_GUARD, "barrier()", bound).text.split("if ")[0]


def test_multiline_statements_are_indented_as_a_whole() -> None:
    text = "import torch\n\ndef f(x):\n    torch.distributed.all_reduce(\n        x,\n    )\n    return x\n"
    new = mutated(ib.Kind.RANK_LOOP, "all_reduce(", text).text.splitlines()
    assert new[3:8] == [
        "    for _cc_i in range(torch.distributed.get_rank() + 1):",
        "        torch.distributed.all_reduce(",
        "            x,",
        "        )",
        "    return x",
    ]


def test_findings_are_new_by_count_not_by_line() -> None:
    def finding(line: int) -> dict[str, object]:
        return {"code": "CC001", "path": "p.py", "function": "f", "line": line, "message": f"at p.py:{line}"}

    baseline = ib.Report([finding(10)], [], [], 0.0)
    assert ib.new_findings(baseline, ib.Report([finding(12)], [], [], 0.0)) == []
    assert ib.new_findings(baseline, ib.Report([finding(12), finding(14)], [], [], 0.0)) == [finding(14)]


def test_unpacking_writes_only_python_files_with_safe_names(tmp_path: Path) -> None:
    members = {
        "pkg/a.py": b"x = 1\n",
        "../evil.py": b"",
        "/abs.py": b"",
        "pkg/data.bin": b"",
        "pkg/../../b.py": b"",
    }
    wheel = tmp_path / "p.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    sdist = tmp_path / "p.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(f"p-1.0/{name}" if not name.startswith("/") else name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    for archive_path, expected in ((wheel, "pkg/a.py"), (sdist, "p-1.0/pkg/a.py")):
        target = tmp_path / archive_path.name.replace(".", "_")
        assert corpus.unpack(archive_path, target) == 1
        assert [p.relative_to(target).as_posix() for p in target.rglob("*.py")] == [expected]
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "b.py").exists()


TWINS = ("CC001/barrier_rank0_fixed.py", "CC001/different_op_fixed.py", "CC004/members_only_fixed.py")
STEP = """import torch.distributed as dist


def step(x, y, group):
    dist.all_reduce(x)
    dist.broadcast(y, src=0)


def sub(x, group):
    dist.all_reduce(x, group=group)
"""


@pytest.mark.slow
def test_a_run_on_fixed_twins_finds_the_injected_rank_guard(tmp_path: Path) -> None:
    corpus = tmp_path / "twins"
    corpus.mkdir()
    (corpus / "__init__.py").write_text("")
    for twin in TWINS:
        shutil.copy(REPO / "fixtures" / twin, corpus / Path(twin).name)
    (corpus / "step.py").write_text(STEP)  # the swap and the group sites: the twins have none
    out = tmp_path / "results.json"
    argv = ["--corpus", str(corpus), "--per-kind", "1", "--verify-cache", "1", "--out", str(out)]
    assert ib.main(argv) == 0
    (package,) = json.loads(out.read_text())["packages"]
    assert package["baseline_findings"] == 0  # fixed twins: nothing to report before injection
    # barrier_rank0's barrier, step's and sub's calls; the twins' other calls are under `if rank`
    assert (package["sites"], package["rank_dependent_sites"], package["pairs"]) == (4, 3, 1)
    outcomes = package["outcomes"]
    assert sorted(outcome["kind"] for outcome in outcomes) == sorted(kind.value for kind in ib.Kind)
    # a collective at the top of a function put under `if rank == 0` is collcheck's core case
    guarded = [
        o for o in outcomes if o["kind"] in ("rank_guard", "swap", *(k.value for k in ib.OBJECT_KINDS))
    ]
    assert len(guarded) == 5 and all(o["found"] and o["codes"] == ["CC001"] for o in guarded)
    assert all(o["found"] or o["reason"] for o in outcomes)
    checked = [o for o in outcomes if o["cache_check"]]
    assert checked and all(o["cache_check"] == "same as --no-cache" for o in checked)
