"""A rule owns its logic: what it claims, its precedence, where it anchors, its message. Adding one
takes no code beyond its own module and one line in the code table (its fixtures, snapshots and
README line are the other files it touches: docs/architecture.md, "Adding a rule")."""

from __future__ import annotations

import shutil
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from collcheck import checks
from collcheck.api import check_paths
from collcheck.checks import CODE_TABLE, all_rules, static_rules
from collcheck.config import Settings, load_settings
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import DivergenceKind

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_every_kind_is_claimed_by_a_rule() -> None:
    claimed = {kind for rule in all_rules() for kind in rule.claims}
    assert claimed == set(DivergenceKind)


def _asked_before(first: str, then: str) -> bool:
    order = [rule.code for rule in static_rules().claiming]
    return order.index(first) < order.index(then)


def test_precedence_asks_the_cause_before_the_symptom() -> None:
    """The relations the owner of a divergence depends on, not one fixed order: a per-process
    value is the cause whatever the kind (CC007 before every rule it shares a kind with); a missing
    group creation, then an exit, is the reason a sequence differs (CC004, then CC003, before the
    general sequence rule CC001)."""
    claiming = static_rules().claiming
    cc007 = checks.rule_by_code("CC007")
    assert cc007 is not None
    # CC008 takes the one per-process value CC007 leaves to it (this rank's own data), so it is
    # asked first; every other rule sharing a kind with CC007 comes after it.
    assert _asked_before("CC008", "CC007")
    for rule in claiming:
        if rule.code not in ("CC007", "CC008") and rule.claims & cc007.claims:
            assert _asked_before("CC007", rule.code), rule.code
    assert _asked_before("CC004", "CC003") and _asked_before("CC003", "CC001")


def test_a_rule_that_claims_a_whole_kind_is_asked_last_for_it() -> None:
    """A rule without `applies` takes every divergence of the kinds it claims: a rule asked after it
    for one of those kinds would never get one. Rules sharing a kind never share a precedence (the
    order between them would be the table's order by accident)."""
    claiming = static_rules().claiming
    for kind in DivergenceKind:
        claimants = [rule for rule in claiming if kind in rule.claims]
        whole = [rule for rule in claimants if not hasattr(rule.module, "applies")]
        assert len(whole) <= 1 and (not whole or claimants[-1] is whole[0]), (kind, claimants)
        assert len({rule.precedence for rule in claimants}) == len(claimants), kind


def test_the_precedence_checks_see_a_rule_shadowed_by_a_whole_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails when CC001, which takes every sequence divergence, is asked first."""
    cc001 = checks.rule_by_code("CC001")
    assert cc001 is not None
    monkeypatch.setattr(cc001.module, "PRECEDENCE", 5)
    all_rules.cache_clear()
    try:
        with pytest.raises(AssertionError):
            test_a_rule_that_claims_a_whole_kind_is_asked_last_for_it()
        with pytest.raises(AssertionError):
            test_precedence_asks_the_cause_before_the_symptom()
    finally:
        monkeypatch.undo()
        all_rules.cache_clear()


def test_deselected_rules_are_not_searched_for() -> None:
    only_memory = static_rules(Settings(select=("CC101",)))
    assert not only_memory.any and only_memory.wanted == frozenset()
    # CC007 and CC008 claim a divergence of any kind that only per-process values explain (CC008:
    # this rank's own data), p2p ones too.
    assert DivergenceKind.P2P in static_rules(Settings(ignore=("CC005",))).wanted
    assert DivergenceKind.P2P in static_rules(Settings(ignore=("CC005", "CC007"))).wanted
    p2p_off = static_rules(Settings(ignore=("CC005", "CC007", "CC008")))
    assert DivergenceKind.P2P not in p2p_off.wanted and DivergenceKind.SEQUENCE in p2p_off.wanted


def test_a_selection_of_memory_rules_asks_the_solver_nothing(tmp_path: Path) -> None:
    """`--select CC101` on a file with a rank-dependent collective: no z3 query, no note."""
    unit = FIXTURES / "CC001" / "barrier_rank0_bug.py"
    selected = load_settings([unit]).with_overrides(jobs=1, cache=False, select=("CC101",))
    result = check_paths([unit], selected)
    assert result.findings == [] and result.notes == []
    everything = check_paths([unit], load_settings([unit]).with_overrides(jobs=1, cache=False))
    assert [f.code for f in everything.findings] == ["CC001"]


NEW_RULE = '''
"""## What it does
Test rule: claims every sequence divergence before CC001.
"""
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import DivergenceKind

CODE = "CC099"
NAME = "test-sequence-rule"
SEVERITY = Severity.WARNING
MESSAGE = "test rule saw {op}"
CLAIMS = frozenset({DivergenceKind.SEQUENCE})
PRECEDENCE = 65
ANCHOR = Anchor.ELEMENT


def describe(d):
    element = d.event_a or d.event_b
    return MESSAGE, {"op": element.op if element is not None else "nothing"}
'''


@pytest.fixture
def added_rule(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The two steps of adding a rule: its module, and its line in CODE_TABLE."""
    module = types.ModuleType("collcheck.checks.cc099_test_sequence_rule")
    exec(compile(textwrap.dedent(NEW_RULE), "<cc099>", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(CODE_TABLE, "CC099", ("cc099_test_sequence_rule", "stable", "0.2.0"))
    all_rules.cache_clear()
    yield
    all_rules.cache_clear()


@pytest.mark.usefixtures("added_rule")
def test_a_new_rule_needs_no_code_beyond_its_module_and_a_table_line() -> None:
    rule = checks.rule_by_code("CC099")
    assert rule is not None and rule.claims == {DivergenceKind.SEQUENCE} and rule.anchor is Anchor.ELEMENT
    assert rule.severity is Severity.WARNING
    unit = FIXTURES / "CC001" / "barrier_rank0_bug.py"
    result = check_paths([unit], load_settings([unit]).with_overrides(jobs=1, cache=False))
    # Asked before CC001 (precedence 65 < 70), the new rule now reports the missing barrier.
    assert [(f.code, f.message) for f in result.findings] == [("CC099", "test rule saw barrier")]


def test_a_rule_phrases_ranks_among_a_groups_members_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local-ranks wording is the rule's (`in_local_ranks`, else the shared default): a rule
    that defines its own is asked with its template, its arguments and the divergence."""
    unit = FIXTURES / "groups" / "local_rank_guard_bug.py"
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False)
    (default,) = check_paths([unit], settings).findings
    assert default.message.startswith("all_reduce at local_rank_guard_bug.py:8 is issued by local rank 0")
    cc001 = checks.rule_by_code("CC001")
    assert cc001 is not None and not hasattr(cc001.module, "in_local_ranks")
    asked: list[tuple[str, int]] = []

    def own_words(template: str, args: dict[str, str], divergence: object) -> tuple[str, dict[str, str]]:
        asked.append((template, len(getattr(divergence, "local_ranks", ()))))
        return template + " among the members of `{group}`", {**args, "group": "G"}

    monkeypatch.setattr(cc001.module, "in_local_ranks", own_words, raising=False)
    (own,) = check_paths([unit], settings).findings
    assert asked == [(cc001.module.MESSAGE_MISSING, 2)]
    assert own.message == (
        "all_reduce at local_rank_guard_bug.py:8 is issued by rank 0 but not by rank 1 (world size 2) "
        "among the members of `G`"
    )


@pytest.mark.parametrize(
    ("unit", "callers"),
    [("CC003/helper_early_return_bug.py", 2), ("deep/cross_module/helper_early_return_bug", 1)],
)
def test_one_root_cause_follows_what_the_rules_explain(
    unit: str, callers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper's early exit (CC003) is reported once: its callers' sequence differences (CC001),
    in the same file or in another, are dropped because CC003 declares `EXPLAINS = {"CC001"}`,
    not because the engine names either code. Without the declaration they are reported too.
    Copies of the fixture, so that no helper run of another test is reused."""

    def codes(copy: Path) -> list[str]:
        settings = load_settings([copy]).with_overrides(jobs=1, cache=False)
        return sorted(f.code for f in check_paths([copy], settings).findings)

    def copied(name: str) -> Path:
        source, target = FIXTURES / unit, tmp_path / name / Path(unit).name
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir()
            shutil.copy(source, target)
        return target

    assert codes(copied("declared")) == ["CC003"]
    cc003 = checks.rule_by_code("CC003")
    assert cc003 is not None and cc003.explains == {"CC001"}
    monkeypatch.setattr(cc003.module, "EXPLAINS", frozenset())
    all_rules.cache_clear()
    try:
        assert codes(copied("undeclared")) == ["CC001"] * callers + ["CC003"]
    finally:
        monkeypatch.undo()
        all_rules.cache_clear()


def test_a_rule_without_claims_is_never_asked_about_divergences() -> None:
    memory = checks.rule_by_code("CC101")
    assert memory is not None and memory.claims == frozenset()
    assert memory not in static_rules().claiming


SUPPRESSED = (
    "import torch.distributed as dist\n\n\ndef f():\n    if dist.get_rank() == 0:\n"
    "        dist.barrier()  # collcheck: ignore[CC001]\n    dist.all_reduce(1)  # collcheck: ignore[CC001]\n"
)


def test_suppressions_of_rules_not_searched_for_are_not_called_unused(tmp_path: Path) -> None:
    """Line 6 suppresses a real CC001 finding, line 7 nothing. A run that looks for CC001 says
    line 7's is unused; a run that skipped CC001's search (`--select CC101`) cannot say either."""
    unit = tmp_path / "suppressed.py"
    unit.write_text(SUPPRESSED, encoding="utf-8")
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False)
    searched = check_paths([unit], settings).unused_suppressions
    assert [(u.location.line, u.codes) for u in searched] == [(7, ("CC001",))]
    skipped = check_paths([unit], settings.with_overrides(select=("CC101",))).unused_suppressions
    assert skipped == []
