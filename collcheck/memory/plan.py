"""How the cache is gathered (all at once or in chunks, list or tensor form), its peak, and advice.

Peak model, per rank, measured on gloo (tests/test_gather_peak.py) and matching NCCL's code path:
the shard `s` stays resident, the output holds `N * s`, and a flat temporary of `N * s` is added by
list-form `all_gather` on every backend (the backend gathers into one flat buffer and copies out) and
by `all_gather_into_tensor` on gloo only. So one gather peaks at `(2N + 1) * s` or `(N + 1) * s`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from collcheck.memory import formulas as f
from collcheck.memory.formulas import CacheLayout, Scale


@dataclass(frozen=True)
class GatherPlan:
    chunks: int = 1  # the units of a rank are gathered in this many pieces, one alive at a time
    form: str = "tensor"  # tensor: all_gather_into_tensor; list: all_gather into a list
    backend: str = "nccl"

    @property
    def has_temporary(self) -> bool:
        return self.form == "list" or self.backend == "gloo"


def units_per_chunk(layout: CacheLayout, plan: GatherPlan) -> int:
    return -(-f.units_per_rank(layout) // plan.chunks)


def chunk_per_token(layout: CacheLayout, plan: GatherPlan) -> int:
    """Output plus temporary of the largest chunk, per cached token."""
    if layout.is_mla:
        return 0  # replicated: there is nothing to gather
    copies = 2 if plan.has_temporary else 1
    units = units_per_chunk(layout, plan)
    return copies * f.gather_world(layout) * layout.batch * units * f.unit_token_bytes(layout)


def peak_per_token(layout: CacheLayout, plan: GatherPlan) -> int:
    return f.local_per_token(layout) + chunk_per_token(layout, plan)


def peak_bytes(seq_len: int, layout: CacheLayout, plan: GatherPlan) -> int:
    """Shard + gathered output of the largest chunk + temporaries, at the moment of the gather."""
    return f.cached_tokens(seq_len, layout) * peak_per_token(layout, plan) + f.constant_bytes(layout)


def max_seq_len(budget: int, layout: CacheLayout, plan: GatherPlan) -> int | None:
    """The largest sequence length whose peak fits; None when a window makes every length fit."""
    room = budget - f.constant_bytes(layout)
    if room < 0:
        return 0
    longest = room // peak_per_token(layout, plan)
    if layout.window and longest >= layout.window:
        return None
    return longest


@dataclass(frozen=True)
class Advice:
    change: str  # chunks | gather | kv-quant | window
    flags: str  # the estimate options that apply it
    peak_bytes: int
    summary: str
    layout: CacheLayout  # the layout and plan after the change, for plotting the alternative
    plan: GatherPlan


def _fewest_chunks(seq_len: int, budget: int, layout: CacheLayout, plan: GatherPlan) -> int | None:
    """The smallest chunk count whose peak fits, from the closed form of the peak; None if none does."""
    if layout.is_mla:
        return None
    room = budget - f.local_bytes(seq_len, layout)
    per_unit = chunk_per_token(layout, replace(plan, chunks=f.units_per_rank(layout)))
    per_unit *= f.cached_tokens(seq_len, layout)
    if room <= 0 or per_unit == 0 or room < per_unit:
        return None
    units_that_fit = room // per_unit
    return -(-f.units_per_rank(layout) // units_that_fit)


def chunk_flags(chunks: int, layout: CacheLayout) -> str:
    if chunks == layout.model.layers and f.heads_per_rank(layout) * chunks == f.units_per_rank(layout):
        return "--chunk-by layer"
    if chunks == f.units_per_rank(layout) and chunks > 1:
        return "--chunk-by head"
    return f"--chunks {chunks}"


def _chunk_advice(seq_len: int, budget: int, layout: CacheLayout, plan: GatherPlan) -> Advice | None:
    chunks = _fewest_chunks(seq_len, budget, layout, plan)
    if chunks is None or chunks <= plan.chunks:
        return None
    chunked = replace(plan, chunks=chunks)
    per_chunk = units_per_chunk(layout, chunked)
    return Advice(
        "chunks",
        chunk_flags(chunks, layout),
        peak_bytes(seq_len, layout, chunked),
        f"gather in {chunks} chunks of {per_chunk} layer-head(s) per rank, dropping each before the next",
        layout,
        chunked,
    )


def _gather_form_advice(seq_len: int, budget: int, layout: CacheLayout, plan: GatherPlan) -> Advice | None:
    if plan.form != "list" or layout.is_mla:
        return None
    better = replace(plan, form="tensor")
    peak = peak_bytes(seq_len, layout, better)
    if peak > budget:
        return None
    summary = "gather into one preallocated tensor, without a flat temporary"
    return Advice("gather", "--gather tensor", peak, summary, layout, better)


QUANT_STEPS: tuple[tuple[str, Scale], ...] = (
    ("fp8", Scale("per-tensor")),
    ("int8", Scale("per-token-head")),
    ("int4", Scale("per-group", 32)),
)


def _quant_advice(seq_len: int, budget: int, layout: CacheLayout, plan: GatherPlan) -> Advice | None:
    current = f.row_bytes(layout.model.head_dim, layout)
    for quant, scale in QUANT_STEPS:
        quantized = replace(layout, kv_quant=quant, scale=scale)
        if f.row_bytes(layout.model.head_dim, quantized) >= current:
            continue
        flags = f"--kv-quant {quant} --scale {scale.label}"
        chosen = plan
        if peak_bytes(seq_len, quantized, plan) > budget:
            chunks = _fewest_chunks(seq_len, budget, quantized, plan)
            if chunks is None:
                continue
            chosen = replace(plan, chunks=chunks)
            flags += f" {chunk_flags(chunks, quantized)}"
        peak = peak_bytes(seq_len, quantized, chosen)
        summary = f"store the cache as {quant} with {scale.label} fp32 scales"
        return Advice("kv-quant", flags, peak, summary, quantized, chosen)
    return None


def _window_advice(seq_len: int, budget: int, layout: CacheLayout, plan: GatherPlan) -> Advice | None:
    longest = max_seq_len(budget, replace(layout, window=None), plan)
    if not longest or longest >= seq_len:
        return None
    windowed = replace(layout, window=longest)
    summary = f"keep only the last {longest:,} tokens in the cache"
    return Advice(
        "window", f"--window {longest}", peak_bytes(seq_len, windowed, plan), summary, windowed, plan
    )


def advise(seq_len: int, budget: int, layout: CacheLayout, plan: GatherPlan) -> tuple[Advice, ...]:
    """The changes that make the peak fit, smallest first: chunking, gather form, quantization, window."""
    if peak_bytes(seq_len, layout, plan) <= budget:
        return ()
    steps = (_chunk_advice, _gather_form_advice, _quant_advice, _window_advice)
    found = (step(seq_len, budget, layout, plan) for step in steps)
    return tuple(advice for advice in found if advice is not None)


@dataclass(frozen=True)
class Estimate:
    layout: CacheLayout
    plan: GatherPlan
    seq_len: int
    bytes_per_token: int
    local_bytes: int
    gathered_bytes: int
    peak_bytes: int
    budget_bytes: int | None
    fits: bool | None
    max_seq_len: int | None
    advice: tuple[Advice, ...]


def estimate(seq_len: int, layout: CacheLayout, plan: GatherPlan, budget: int | None) -> Estimate:
    peak = peak_bytes(seq_len, layout, plan)
    return Estimate(
        layout=layout,
        plan=plan,
        seq_len=seq_len,
        bytes_per_token=f.bytes_per_token(layout),
        local_bytes=f.local_bytes(seq_len, layout),
        gathered_bytes=f.gathered_bytes(seq_len, layout),
        peak_bytes=peak,
        budget_bytes=budget,
        fits=None if budget is None else peak <= budget,
        max_seq_len=None if budget is None else max_seq_len(budget, layout, plan),
        advice=() if budget is None else advise(seq_len, budget, layout, plan),
    )
