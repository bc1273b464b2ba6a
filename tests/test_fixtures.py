"""Every fixture behaves as its inline markers say: `# expect: CC001` on each flagged line,
nothing else flagged. A fixed twin carries no markers and must be clean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_support import fixture_run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MARKER = re.compile(r"#\s*expect:\s*(?P<codes>CC\d{3}(?:\s*,\s*CC\d{3})*)")


def _fixture_units() -> list[Path]:
    """Single-file fixtures, and folders holding a multi-file fixture (marked by `__fixture__`)."""
    units: list[Path] = []
    for path in sorted(FIXTURES.rglob("*.py")):
        if any((parent / "__fixture__").exists() for parent in path.parents if FIXTURES in parent.parents):
            continue
        units.append(path)
    units.extend(sorted(marker.parent for marker in FIXTURES.rglob("__fixture__")))
    return units


def expected_findings(unit: Path) -> set[tuple[str, int, str]]:
    files = [unit] if unit.is_file() else sorted(unit.rglob("*.py"))
    expected: set[tuple[str, int, str]] = set()
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            match = MARKER.search(line)
            if match:
                for code in match.group("codes").split(","):
                    expected.add((file.name, number, code.strip()))
    return expected


UNITS = _fixture_units()

# Known false negatives, documented here until the engine covers them (strict: a fix must remove
# the entry, so this list cannot rot).
KNOWN_GAPS: dict[str, str] = {
    # Rebuilt public hang reports (fixtures/reports/README.md) that today's analyzer misses.
    "reports/accelerate_save_state_main_bug.py": (
        "Accelerator.save_state is not catalogued (left out of rules/accelerate.toml on purpose: it is "
        "collective only under the DeepSpeed/FSDP plugins, and collcheck does not read the accelerate "
        "launch config)"
    ),
    "reports/dp_idle_rank_skips_moe_forward_bug.py": (
        "`batch is None` is per-rank scheduler state, but the file holds no sound evidence of it: the "
        "only signal is that activations computed from the batch go through all_to_all_single, and a "
        "tensor exchanged whole is not taken as evidence of per-rank data (taking it reported 20 new "
        "findings on vllm; narrowed to a None-test of its source it is still unsound: under Ulysses "
        "sequence parallelism every rank of the all_to_all group holds the same batch, so its None-ness "
        "agrees). The sound evidence, an idle-rank path issuing the same collectives with a dummy batch "
        "or a count of the batch combined across ranks, is in the fixed twin only (it is the fix)"
    ),
    "reports/dtensor_full_tensor_rank0_bug.py": (
        "DTensor.full_tensor() (an all-gather over the DTensor's mesh) is not catalogued, and torch's "
        "bundled summary (rules/summaries/torch-2.13.0.toml, made from its source) leaves it out: it "
        "reaches the all-gather through Redistribute.apply (autograd Functions' forwards are followed) only"
        " when the placements differ (a value of the tensor, no configuration a `when` can name), inside a "
        "loop over transform steps (a summary leaves collectives in loops out), through placement objects "
        "whose class is chosen at run time (`current.is_shard()`, then `current._to_replicate_tensor`, into"
        " funcol); and an entry would still need `param` (a value of `state_dict().items()`) to be known as"
        " a DTensor; a dist.barrier() under the same rank-0 guard is found"
    ),
    "reports/hf_trainer_save_model_fsdp_main_bug.py": (
        "transformers Trainer.save_model gathers only under FSDP / DeepSpeed ZeRO-3, through "
        "accelerator.get_state_dict and the wrapped model's state_dict (torch FSDP's state_dict is not "
        "catalogued): the bundled transformers summary (5.23.0 source) does not yield it, with or without "
        "a condition; the RANK-env guard itself is understood"
    ),
    "reports/prefetch_check_break_on_full_batch_bug.py": (
        "the `break` depends on per-rank allocator state (token_pool.available_size()), but nothing in "
        "the file says so: the per-request all_reduce combines another value (the request's prefetch "
        "flag), and no result of the pool's methods, nor a value of its kind, is handed to a combining "
        "collective here (a search of sglang 0.5.23 found no `available_size()` result put in a tensor or "
        "gathered either); taking an unknown method's result on an "
        "object attribute as per-rank without such evidence would make every capacity or configuration "
        "read per-rank"
    ),
    "reports/torchmetrics_compute_local_rank0_bug.py": (
        "torchmetrics Metric.compute() (a cross-process state sync) is rebound in Metric.__init__ "
        "(self.compute = self._wrap_compute(self.compute)); a checked file's own rebound methods now run "
        "their wrapper (method_wrappers.py), but a summary runs the class's `def compute`, and the wrapper "
        "syncs only when `self._computed is None` and `self.distributed_available_fn()` (a callable "
        "attribute of unknown value) holds, through a callback handed to lightning_utilities' "
        "apply_to_collection over the metric's states: the bundled torchmetrics summary (1.9.0 source) "
        "does not yield it; the LOCAL_RANK guard itself is understood (a dist.barrier() there is found)"
    ),
    "reports/zero3_generate_unsynced_bug.py": (
        "HF generate() under ZeRO-3: a data-dependent number of forwards, each all-gathering partitioned "
        "parameters through DeepSpeed's forward hooks, which no source of transformers shows; the bundled "
        "transformers summary has generate's own all-reduce only (GenerationMixin._sample, when "
        "synced_gpus), and generate itself is not summarised (its paths differ by data)"
    ),
    "CC008/local_after_combine_bug.py": (
        "a value combined across ranks counts as agreed from the combining call on (own_data."
        "mark_combined), whatever the name the later test reads: right for the gathered list and for "
        "a value all-reduced in place, wrong for the local count after a copy of it was all-reduced "
        "into another tensor; telling them apart needs the combined tensor's identity, and a change "
        "here is a precision question (every CC008 finding on the 17 packages re-triaged)"
    ),
    "reports/zero3_prompt_encoder_save_rank0_bug.py": (
        "deepspeed.zero.GatheredParameters gathers in __enter__ (context managers are summarised, and "
        "`with` issues what __enter__ issues) through a function attached to each parameter at run time "
        "(Init._convert_to_deepspeed_param sets param.all_gather): no source of deepspeed 0.19.8 shows "
        "that call as a collective, so its bundled summary has no __enter__ entry"
    ),
}


def _param(unit: Path) -> object:
    name = str(unit.relative_to(FIXTURES))
    if name in KNOWN_GAPS:
        return pytest.param(unit, id=name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[name]))
    return pytest.param(unit, id=name)


@pytest.mark.parametrize("unit", [_param(u) for u in UNITS])
def test_fixture(unit: Path) -> None:
    result = fixture_run(unit)
    assert not result.errors, result.errors
    found = {(Path(f.location.path).name, f.location.line, f.code) for f in result.findings}
    assert found == expected_findings(unit)


def test_there_are_enough_fixture_pairs() -> None:
    static = [u for u in UNITS if "memory" not in u.parts]
    bugs = [u for u in static if expected_findings(u)]
    fixed = [u for u in static if not expected_findings(u)]
    assert len(bugs) >= 30 and len(fixed) >= 30


def test_every_rule_has_a_bug_and_a_fixed_fixture() -> None:
    """Each code is expected by some `*_bug` fixture, whose `*_fixed` twin expects nothing."""
    from collcheck.checks import all_rules

    twins: dict[str, set[str]] = {}
    for unit in UNITS:
        if not unit.name.endswith("_bug") and not unit.stem.endswith("_bug"):
            continue
        twin = unit.with_name(unit.name.replace("_bug", "_fixed"))
        if twin.exists() and not expected_findings(twin):
            for _, _, code in expected_findings(unit):
                twins.setdefault(code, set()).add(unit.name)
    assert {rule.code for rule in all_rules()} <= set(twins), sorted(set(twins))


def test_readme_rule_table_is_generated_from_the_rules() -> None:
    from collcheck.checks import markdown_table

    readme = (FIXTURES.parent / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme
