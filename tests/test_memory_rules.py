"""CC101 and CC102 on the memory fixtures, calling each rule's `check_module` on an `ast` tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from collcheck.catalog import load_catalog
from collcheck.checks import cc101_all_gather_over_budget as cc101
from collcheck.checks import cc102_all_gather_object_on_tensors as cc102
from collcheck.config import Settings, load_settings
from collcheck.findings import Finding
from collcheck.source import SourceFile
from collcheck.static.context import ModuleContext
from collcheck.static.names import module_imports

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "memory"
MARKER = re.compile(r"#\s*expect:\s*(CC10[12])")
FILES = sorted(FIXTURES.glob("*.py"))


def context(path: Path, settings: Settings) -> ModuleContext:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    return ModuleContext(tree, SourceFile(str(path), text), settings, load_catalog(), module_imports(tree))


def run_rules(path: Path, settings: Settings | None = None) -> list[Finding]:
    ctx = context(path, settings or load_settings([FIXTURES]))
    return cc101.check_module(ctx) + cc102.check_module(ctx)


def markers(path: Path) -> set[tuple[int, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {(number, m.group(1)) for number, line in enumerate(lines, 1) if (m := MARKER.search(line))}


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fixture_markers(path: Path) -> None:
    assert {(f.location.line, f.code) for f in run_rules(path)} == markers(path)


def test_every_bug_has_a_fixed_twin() -> None:
    bugs = {p.name.removesuffix("_bug.py") for p in FILES if p.name.endswith("_bug.py")}
    fixed = {p.name.removesuffix("_fixed.py") for p in FILES if p.name.endswith("_fixed.py")}
    assert bugs == fixed and len(bugs) >= 4
    assert all(
        markers(FIXTURES / f"{name}_bug.py") and not markers(FIXTURES / f"{name}_fixed.py") for name in bugs
    )


def args_of(finding: Finding) -> dict[str, str]:
    return dict(finding.message_args)


def test_seed_gatherer_figures() -> None:
    findings = run_rules(FIXTURES / "seed_kv_gatherer_bug.py")
    assert len(findings) == 2
    first = args_of(findings[0])
    # 32 layers x (2 GiB K + 2 GiB V) kept, plus the 256 MiB shard of the call.
    assert first["footprint"] == "128.25 GiB (137,707,388,928 bytes)"
    assert first["budget"] == "16 GiB"
    assert "chunk by layer" in first["advice"] and "4.25 GiB, fits" in first["advice"]
    assert "window of at most 4,088 tokens" in first["advice"]
    assert findings[0].function == "KVCacheAllGatherer.gather_all_layers"


def test_seed_chunked_cat_is_reported_at_the_cat() -> None:
    (finding,) = run_rules(FIXTURES / "seed_chunked_cat_bug.py")
    assert args_of(finding)["op"] == "torch.cat"
    assert args_of(finding)["footprint"] == "128 GiB (137,438,953,472 bytes)"  # 2 x 32 chunks of 2 GiB


def test_list_form_counts_the_flat_temporary() -> None:
    (finding,) = run_rules(FIXTURES / "list_all_gather_bug.py")
    assert args_of(finding)["op"] == "torch.distributed.all_gather"
    assert args_of(finding)["footprint"] == "136 GiB (146,028,888,064 bytes)"  # 8 + 64 + 64 GiB


def test_cc102_gives_the_peak_when_the_size_is_known() -> None:
    findings = run_rules(FIXTURES / "all_gather_object_bug.py")
    peaks = [args_of(f)["peak"] for f in findings]
    assert peaks[0] == "" and peaks[2] == ""
    assert peaks[1] == ", about 4.75 GiB (5,100,273,664 bytes) at the peak on each of 8 ranks"  # 19 x 256 MiB


def test_quiet_without_a_budget() -> None:
    assert cc101.check_module(context(FIXTURES / "seed_kv_gatherer_bug.py", Settings())) == []


def test_quiet_when_under_the_budget() -> None:
    memory = dict(load_settings([FIXTURES]).memory)
    roomy = Settings(memory=tuple(sorted({**memory, "budget": "256GiB"}.items())))
    assert cc101.check_module(context(FIXTURES / "seed_kv_gatherer_bug.py", roomy)) == []


def test_rule_modules_follow_the_registry_contract() -> None:
    for rule in (cc101, cc102):
        doc = rule.__doc__ or ""
        sections = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## References")
        assert all(section in doc for section in sections)
    assert (cc101.CODE, cc101.NAME, cc102.CODE, cc102.NAME) == (
        "CC101",
        "all-gather-over-budget",
        "CC102",
        "all-gather-object-on-tensors",
    )
    assert cc102.DEFAULT_ENABLED is False
