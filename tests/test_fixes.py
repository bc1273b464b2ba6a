"""Fixes: every rule's before/after examples, verification, and byte-exact edits."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from collcheck.adopt.edits import apply_edits, minimal_edit
from collcheck.adopt.fixers import fixer_modules, fixers_for
from collcheck.adopt.fixes import FileFixer, fix_files
from collcheck.checks import Rule, all_rules, rule_by_code
from collcheck.config import Settings
from collcheck.findings import (
    Applicability,
    Edit,
    FileResult,
    Finding,
    Fix,
    Location,
    RunResult,
    Severity,
)

EVERYTHING = frozenset(Applicability)
SETTINGS = Settings(extend_select=("CC102",), cache=False, jobs=1)

EXAMPLES = [
    pytest.param(rule.code, before, after, id=f"{rule.code}-{number}")
    for rule in all_rules()
    for number, (before, after) in enumerate(getattr(rule.module, "FIX_EXAMPLES", ()))
]


def _fixed(tmp_path: Path, text: str, allowed: frozenset[Applicability] = EVERYTHING) -> str:
    path = tmp_path / "example.py"
    path.write_bytes(text.encode())
    changes = fix_files([str(path)], SETTINGS, allowed)
    return changes[0].after if changes else text


@pytest.mark.parametrize(("code", "before", "after"), EXAMPLES)
def test_rule_fix_example(tmp_path: Path, code: str, before: str, after: str) -> None:
    assert _fixed(tmp_path, before) == after


def test_every_rule_with_a_fixer_has_examples() -> None:
    with_fixers = {module.RULE for module in fixer_modules()}
    with_examples = {rule.code for rule in all_rules() if getattr(rule.module, "FIX_EXAMPLES", ())}
    assert with_fixers and with_fixers == with_examples


def test_each_fixer_declares_a_rule_of_the_table_and_variants_of_that_rule() -> None:
    """A fixer is found by its `RULE` and `VARIANTS` (no list of fixers is kept): each must name a
    rule of the table, handle some of that rule's `Variant`s, and have a `fix`."""
    modules = fixer_modules()
    assert modules
    for module in modules:
        rule = rule_by_code(module.RULE)
        assert rule is not None and rule.code == module.RULE, module.__name__
        assert module.VARIANTS and all(isinstance(v, rule.module.Variant) for v in module.VARIANTS)
        assert callable(module.fix) and callable(rule.module.variant)


def _finding_of(template: str, code: str, argument: str = "0") -> Finding:
    """A finding with `template` and an argument for each of its fields, as `describe` gives one."""
    names = [field for _, field, _, _ in string.Formatter().parse(template) if field]
    args = tuple(sorted((name, argument if name == "argument" else "0") for name in names))
    return Finding(code, Severity.ERROR, Location("x.py", 1), template, args)


RULES_WITH_VARIANTS = [rule for rule in all_rules() if hasattr(rule.module, "variant")]


@pytest.mark.parametrize("rule", RULES_WITH_VARIANTS, ids=[rule.code for rule in RULES_WITH_VARIANTS])
def test_a_rule_tells_each_of_its_messages_apart(rule: Rule) -> None:
    """Each message template of a rule with variants is a variant of its own (CC006's MESSAGE is
    two, a root and a reduce op, told apart by the `argument` it names)."""
    findings = [
        _finding_of(text, rule.code, argument)
        for name, text in vars(rule.module).items()
        if name.startswith("MESSAGE")
        for argument in (getattr(rule.module, "ARGUMENTS", {}).values() if "{argument}" in text else ["0"])
    ]
    variants = [rule.module.variant(finding) for finding in findings]
    assert None not in variants and len(set(variants)) == len(variants) == len(rule.module.Variant)


GROUP_GUARD = (
    "import torch.distributed as dist\n\n\ndef reduce_on_group(t, group):\n"
    "    if dist.get_rank(group) == 0:\n        dist.all_reduce(t, group=group)\n    return t\n"
)


def test_a_collective_guarded_by_a_local_rank_is_hoisted(tmp_path: Path) -> None:
    """The finding reads `local rank 0 ... in `group``: the engine rewords CC001's template among a
    group's members. The hoist matched the template text before, and offered nothing here."""
    fixer = FileFixer("group.py", GROUP_GUARD, SETTINGS)
    [finding] = fixer.findings
    assert "is issued by local rank 0" in finding.message
    proposal = fixer.propose(finding)
    assert proposal is not None and proposal[0].applicability is Applicability.UNSAFE
    assert _fixed(tmp_path, GROUP_GUARD) == GROUP_GUARD.replace(
        "    if dist.get_rank(group) == 0:\n        dist.all_reduce", "    dist.all_reduce"
    )


def test_the_local_rank_wording_keeps_the_variant() -> None:
    """Among a group's members the engine rewords `rank {rank_x}` as `local rank {rank_x} ... in
    `{group}``: the fixers, matching on the variant, still recognise the finding (matching on the
    template text, they did not)."""
    from collcheck.checks import cc001_mismatched_collective_sequence as cc001

    reworded = cc001.MESSAGE_MISSING.replace("rank {rank_x}", "local rank {rank_x}") + " in `{group}`"
    finding = _finding_of(reworded, "CC001")
    assert cc001.variant(finding) is cc001.Variant.MISSING
    assert [fixer.__module__ for fixer in fixers_for(finding)] == ["collcheck.adopt.fixers.hoist"]


def test_safe_only_leaves_unsafe_fixes_alone(tmp_path: Path) -> None:
    from collcheck.checks.cc001_mismatched_collective_sequence import FIX_EXAMPLES

    before = FIX_EXAMPLES[0][0]
    assert _fixed(tmp_path, before, frozenset({Applicability.SAFE})) == before


def test_fix_that_would_leave_its_finding_is_not_applied(tmp_path: Path) -> None:
    # The barrier is not the guard's last statement: hoisting it past `use(t)` could change what
    # the guarded work sees, so no fix is offered.
    before = (
        "import torch.distributed as dist\n\n\ndef f(t):\n    if dist.get_rank() == 0:\n"
        "        dist.broadcast(t, src=0)\n        use(t)\n"
    )
    assert _fixed(tmp_path, before) == before


def test_argument_bound_inside_the_guard_blocks_the_hoist(tmp_path: Path) -> None:
    before = (
        "import torch.distributed as dist\n\n\ndef f():\n    if dist.get_rank() == 0:\n"
        "        t = make()\n        dist.all_reduce(t)\n"
    )
    assert _fixed(tmp_path, before) == before


def test_root_that_is_arithmetic_on_the_rank_is_not_guessed(tmp_path: Path) -> None:
    before = "import torch.distributed as dist\n\n\ndef f(t, rank):\n    dist.broadcast(t, src=rank % 2)\n"
    assert _fixed(tmp_path, before) == before


TWO_FINDINGS = (
    "import torch.distributed as dist\n\n\ndef f(t, names):\n    if dist.get_rank() == 0:\n"
    "        dist.barrier()\n    for n in set(names):\n        dist.all_reduce(t[n])\n"
)


GUARDED_BARRIER = "    if dist.get_rank() == 0:\n        dist.barrier()"


def _verifier() -> tuple[FileFixer, dict[str, Finding]]:
    fixer = FileFixer("two.py", TWO_FINDINGS, SETTINGS)
    return fixer, {finding.code: finding for finding in fixer.findings}


def test_verification_accepts_exactly_one_finding_removed() -> None:
    fixer, found = _verifier()
    assert set(found) == {"CC001", "CC007"}
    hoisted = TWO_FINDINGS.replace(
        "    if dist.get_rank() == 0:\n        dist.barrier()", "    dist.barrier()"
    )
    assert fixer._verified(hoisted, found["CC001"])


def test_verification_refuses_a_rewrite_that_changes_another_line() -> None:
    fixer, found = _verifier()
    both = TWO_FINDINGS.replace(GUARDED_BARRIER, "    dist.barrier()")
    both = both.replace("set(names)", "sorted(names)")
    assert not fixer._verified(both, found["CC001"])  # removes CC007 too


def test_verification_refuses_what_does_not_parse_or_keeps_the_finding() -> None:
    fixer, found = _verifier()
    assert not fixer._verified(TWO_FINDINGS.replace("def f(", "def f(("), found["CC001"])
    assert not fixer._verified(TWO_FINDINGS + "\n# nothing changed\n", found["CC001"])


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("for n in set(x):\n", "for n in sorted(set(x)):\n"),
        ("ab", "abc"),
        ("abc", ""),
        ("x\r\ny\r\n", "x\r\nz\r\n"),
    ],
)
def test_minimal_edit_round_trips(before: str, after: str) -> None:
    edit = minimal_edit(before, after)
    assert edit is not None and apply_edits(before, [edit]) == after


# Bug fixtures whose fixed twin (written before the fixes existed) is exactly what the fixes
# produce, once the `# expect:` markers are taken out.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TWINS = (
    "CC001/barrier_rank0_bug.py",
    "CC001/is_master_flag_bug.py",
    "CC006/broadcast_src_rank_bug.py",
    "CC006/reduce_dst_rank_bug.py",
    "CC007/set_iteration_bug.py",
    "deep/frameworks/lightning_strategy_barrier_bug.py",
    "deep/frameworks/vllm_pynccl_bug.py",
    "deep/groups/new_subgroups_bug.py",
    "deep/methods/super_save_bug.py",
    "deep/per_rank_values/set_union_bug.py",
)
MARKER = re.compile(r"  # expect: CC\d{3}(?:, CC\d{3})*")


@pytest.mark.parametrize("name", TWINS)
def test_fixing_a_bug_fixture_gives_its_fixed_twin(tmp_path: Path, name: str) -> None:
    bug = FIXTURES / name
    twin = bug.with_name(bug.name.replace("_bug.py", "_fixed.py"))
    assert MARKER.sub("", _fixed(tmp_path, bug.read_text(encoding="utf-8"))) == twin.read_text(
        encoding="utf-8"
    )


def _result_with_fixes() -> tuple[RunResult, Finding, Finding]:
    safe = Finding("CC007", Severity.WARNING, Location("src/a.py", 3, 4), "set order", ())
    unsafe = Finding("CC001", Severity.ERROR, Location("src/a.py", 9, 8), "barrier on rank 0", ())
    edit = Edit(3, 13, 3, 20, "sorted(set(x)")
    result = RunResult(files=[FileResult("src/a.py", findings=[safe, unsafe])], fixes_computed=True)
    result.fixes[safe] = Fix(Applicability.SAFE, "iterate over sorted(...)", (edit,))
    return result, safe, unsafe


def test_sarif_fixes_are_valid_and_carry_the_edits(tmp_path: Path) -> None:
    from collcheck.report.sarif import sarif_log
    from tests.test_report_formats import validate_sarif

    result, _, _ = _result_with_fixes()
    log = sarif_log(result, tmp_path)
    assert validate_sarif(log) == []
    with_fix, without = log["runs"][0]["results"]
    assert "fixes" not in without
    (fix,) = with_fix["fixes"]
    assert fix["properties"] == {"applicability": "safe"}
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "src/a.py", "uriBaseId": "%SRCROOT%"}
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 3, "startColumn": 14, "endLine": 3, "endColumn": 21},
            "insertedContent": {"text": "sorted(set(x)"},
        }
    ]


def test_json_says_null_for_no_fix_only_when_fixes_were_computed() -> None:
    from collcheck.report.json import result_to_json

    result, _, _ = _result_with_fixes()
    with_fix, without = result_to_json(result)["findings"]
    assert with_fix["fix"]["edits"][0] == {
        "line": 3,
        "column": 14,
        "end_line": 3,
        "end_column": 21,
        "content": "sorted(set(x)",
    }
    assert without["fix"] is None
    result.fixes_computed = False
    result.fixes.clear()
    assert all("fix" not in finding for finding in result_to_json(result)["findings"])


def test_a_dropped_guard_keeps_its_comments(tmp_path: Path) -> None:
    before = (
        "import torch.distributed as dist\n\n\ndef sync(rank):\n    # above the guard\n"
        "    if rank == 0:  # on the if line\n        # above the call\n"
        "        dist.barrier()  # on the call\n"
    )
    after = (
        "import torch.distributed as dist\n\n\ndef sync(rank):\n    # above the guard\n"
        "    # on the if line\n    # above the call\n    dist.barrier()  # on the call\n"
    )
    assert _fixed(tmp_path, before) == after
