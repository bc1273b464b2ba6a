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
    "semantics/group_rings/batch_lists_unmatched_bug.py": (
        "batch_isend_irecv op lists are not recorded (posted transfers are no element of a sequence), "
        "and the point-to-point simulation runs blocking calls only: pairing one batch's sends with the "
        "peers' receives needs posted batches as events that only p2p_schedule reads"
    ),
    # Rebuilt public hang reports (fixtures/reports/README.md) that today's analyzer misses.
    "reports/accelerate_save_state_main_bug.py": (
        "Accelerator.save_state is not catalogued (left out of rules/accelerate.toml on purpose: it is "
        "collective only under the DeepSpeed/FSDP plugins, and collcheck does not read the accelerate "
        "launch config)"
    ),
    "reports/dp_idle_rank_skips_moe_forward_bug.py": (
        "`batch is None` is per-rank scheduler state; the only evidence in the code is that the "
        "activations computed from the batch go through all_to_all_single, and a tensor exchanged "
        "whole is not taken as evidence of per-rank data (model activations and gradients are what "
        "collectives are for: taking them as evidence reported 20 new findings on vllm, mostly on "
        "shapes that agree); a count put in a tensor and all-reduced is (local_data.py)"
    ),
    "reports/dtensor_full_tensor_rank0_bug.py": (
        "DTensor.full_tensor() (an all-gather over the DTensor's mesh) is not catalogued, and torch has no "
        "summary (torch is catalogued by hand; no bundled torch summary): its source reaches the all-gather "
        "through Redistribute.apply (autograd Functions of the file now run their forward, "
        "autograd_functions.py), then a loop over transform steps dispatching on placement objects "
        "(`current.is_shard()`, `placement._to_replicate_tensor`) into funcol, which a summary leaves out "
        "(collectives in loops, receivers' classes chosen at run time); a dist.barrier() under the same "
        "rank-0 guard is found"
    ),
    "reports/hf_trainer_save_model_fsdp_main_bug.py": (
        "transformers Trainer.save_model gathers only under FSDP / DeepSpeed ZeRO-3, through "
        "accelerator.get_state_dict and the wrapped model's state_dict (torch FSDP's state_dict is not "
        "catalogued): the bundled transformers summary (5.23.0 source) does not yield it, with or without "
        "a condition; the RANK-env guard itself is understood"
    ),
    "reports/prefetch_check_break_on_full_batch_bug.py": (
        "the `break` depends on per-rank allocator state (token_pool.available_size()), which is not a "
        "per-process value source to collcheck, so the per-request all_reduce count is not seen to differ"
    ),
    "reports/reduce_loss_then_best_save_bug.py": (
        "the FSDP state_dict gather inside the save (FSDP.state_dict_type with FULL_STATE_DICT, then "
        "model.state_dict()) is not catalogued and torch has no summary; hooks a class registers run "
        "around state_dict() (module_hooks.py), but FSDP registers them from another file by reflection "
        "(_state_dict_utils: `getattr(state, name)(hook)` in a loop over (name, hook) pairs), and its hook "
        "dispatches on the state-dict type through a dict of functions down to FlatParamHandle.unshard; the "
        "save decision on the loss after dist.reduce(dst=0) is rank-dependent (a dist.barrier() there is "
        "found: fixtures/semantics/dataflow/reduce_to_root_decision_bug.py)"
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
