"""Rendering an estimate: the JSON contract and the text table. Returns strings; never prints."""

from __future__ import annotations

from typing import Any

from collcheck.memory import formulas as f
from collcheck.memory.plan import Estimate, units_per_chunk
from collcheck.memory.units import exact, gib


def to_json(est: Estimate) -> dict[str, Any]:
    """Sizes in bytes, per rank unless the key says otherwise. The first eight keys are a contract."""
    layout, plan = est.layout, est.plan
    return {
        "bytes_per_token": est.bytes_per_token,
        "local_bytes": est.local_bytes,
        "gathered_bytes": est.gathered_bytes,
        "peak_bytes": est.peak_bytes,
        "budget_bytes": est.budget_bytes,
        "fits": est.fits,
        "max_seq_len": est.max_seq_len,
        "advice": [
            {"change": a.change, "flags": a.flags, "peak_bytes": a.peak_bytes, "summary": a.summary}
            for a in est.advice
        ],
        "model": {
            "name": layout.model.name,
            "layers": layout.model.layers,
            "kv_heads": layout.model.kv_heads,
            "head_dim": layout.model.head_dim,
            "mla": layout.is_mla,
        },
        "seq_len": est.seq_len,
        "batch": layout.batch,
        "tp": layout.tp,
        "dtype": layout.dtype,
        "kv_quant": layout.kv_quant,
        "scale": layout.scale.label,
        "window": layout.window,
        "plan": {"chunks": plan.chunks, "gather": plan.form, "backend": plan.backend},
    }


def _row(label: str, size: int | None) -> str:
    if size is None:
        return f"  {label:<26}{'-':>14}"
    return f"  {label:<26}{gib(size):>14}  {size:>20,} B"


def _shape_lines(est: Estimate) -> list[str]:
    layout, model = est.layout, est.layout.model
    if layout.is_mla:
        heads = f"MLA latent of {model.head_dim} (replicated on all {layout.tp} ranks)"
    else:
        per_rank = f.heads_per_rank(layout)
        heads = f"{model.kv_heads} KV heads, {per_rank} per rank on tp={layout.tp}, head dim {model.head_dim}"
    quant = (
        "" if layout.kv_quant == "none" else f", quantized {layout.kv_quant} ({layout.scale.label} scales)"
    )
    window = f", window {layout.window:,}" if layout.window else ""
    chunk = units_per_chunk(layout, est.plan)
    gather = (
        "none needed (every rank holds the whole latent cache)"
        if layout.is_mla
        else f"{est.plan.form} form on {est.plan.backend}, "
        f"{est.plan.chunks} chunk(s) of {chunk} layer-head(s) per rank"
    )
    return [
        f"Model:    {model.name}: {model.layers} layer{'' if model.layers == 1 else 's'}, {heads}",
        f"Cache:    {layout.dtype}{quant}, seq-len {est.seq_len:,} x batch {layout.batch}{window}",
        f"Gather:   {gather}",
    ]


def _verdict(est: Estimate) -> list[str]:
    if est.budget_bytes is None or est.fits is None:
        return ["Verdict:  no --budget given"]
    if est.fits:
        words = f"fits: peak {gib(est.peak_bytes)} of {gib(est.budget_bytes)}"
    else:
        over = est.peak_bytes - est.budget_bytes
        words = f"does NOT fit: peak exceeds the budget by {gib(over)} ({exact(over)})"
    longest = (
        "any (the window bounds the cache)" if est.max_seq_len is None else f"{est.max_seq_len:,} tokens"
    )
    return [f"Verdict:  {words}", f"Longest sequence that fits this plan: {longest}"]


def _advice_lines(est: Estimate) -> list[str]:
    if est.fits is not False:
        return []
    if not est.advice:
        return ["Advice:   nothing on its own fits; the shard alone is too large: raise --tp or the budget"]
    lines = ["Advice (smallest change first):"]
    for advice in est.advice:
        lines.append(f"  {advice.flags:<44} peak {gib(advice.peak_bytes):>12}  {advice.summary}")
    return lines


def to_text(est: Estimate) -> str:
    table = [
        f"  {'per rank':<26}{'GiB':>14}  {'bytes':>22}",
        _row("KV per token (whole model)", est.bytes_per_token),
        _row("local shard", est.local_bytes),
        _row("gathered (all layers)", est.gathered_bytes),
        _row("peak during gather", est.peak_bytes),
        _row("budget", est.budget_bytes),
    ]
    return "\n".join([*_shape_lines(est), "", *table, "", *_verdict(est), *_advice_lines(est)])
