"""Exact KV-cache and all-gather sizes, in integer bytes.

Every size here is `tokens * per_token + constant`, with integer coefficients, so that the largest
sequence length under a budget is a floor division rather than a search.

Vocabulary. A *unit* is one layer's K and V for one KV head that a rank holds. With tensor
parallelism of `tp`, each rank holds `kv_heads / tp` heads of every layer (one replicated head when
`kv_heads < tp`); an MLA cache (DeepSeek-V2/V3) has no heads to split and is replicated on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from collcheck.memory.model_shape import ModelShape

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
QUANT_BITS: dict[str, int] = {"fp8": 8, "int8": 8, "int4": 4}
SCALE_BYTES = 4  # quantization scales are fp32
GATHER_FORMS = ("tensor", "list")
BACKENDS = ("nccl", "gloo", "hccl")


class LayoutError(ValueError):
    """A combination the estimate cannot describe (e.g. a TP size that does not divide the heads)."""


@dataclass(frozen=True)
class Scale:
    """Where quantization scales live: one per K/V tensor of a layer, per token and head, or per group."""

    kind: str = "per-token-head"  # per-tensor | per-token-head | per-group
    group: int = 0  # elements per scale, for per-group

    @property
    def label(self) -> str:
        return f"per-group:{self.group}" if self.kind == "per-group" else self.kind


def parse_scale(text: str) -> Scale:
    if text in ("per-tensor", "per-token-head"):
        return Scale(kind=text)
    prefix, _, group = text.partition(":")
    if prefix == "per-group" and group.isdigit() and int(group) > 0:
        return Scale(kind="per-group", group=int(group))
    raise LayoutError(f"unknown scale '{text}' (expected per-tensor, per-token-head or per-group:G)")


@dataclass(frozen=True)
class CacheLayout:
    """How the cache is stored: the model, its sharding, element type, quantization and window."""

    model: ModelShape
    tp: int = 1
    batch: int = 1
    dtype: str = "fp16"
    kv_quant: str = "none"  # none | fp8 | int8 | int4
    scale: Scale = Scale()
    window: int | None = None  # keep only the last `window` tokens

    @property
    def is_mla(self) -> bool:
        return self.model.mla is not None


def row_bytes(width: int, layout: CacheLayout) -> int:
    """One token's K (or V) for one head: `width` elements, plus any per-token quantization scales."""
    if layout.kv_quant == "none":
        return width * DTYPE_BYTES[layout.dtype]
    data = -(-width * QUANT_BITS[layout.kv_quant] // 8)  # int4 packs two elements per byte
    if layout.scale.kind == "per-token-head":
        return data + SCALE_BYTES
    if layout.scale.kind == "per-group":
        return data + -(-width // layout.scale.group) * SCALE_BYTES
    return data  # per-tensor scales do not grow with tokens: see constant_bytes


def kv_factor(layout: CacheLayout) -> int:
    """K and V are cached separately, except in MLA where one latent serves both."""
    return 1 if layout.is_mla else 2


def unit_token_bytes(layout: CacheLayout) -> int:
    """One token of one unit (one layer, one KV head, K and V)."""
    return kv_factor(layout) * row_bytes(layout.model.head_dim, layout)


def heads_per_rank(layout: CacheLayout) -> int:
    if layout.is_mla:
        return 1
    kv, tp = layout.model.kv_heads, layout.tp
    if kv >= tp:
        if kv % tp:
            raise LayoutError(f"--tp {tp} does not divide the {kv} KV heads")
        return kv // tp
    if tp % kv:
        raise LayoutError(f"{kv} KV heads cannot be replicated evenly over --tp {tp}")
    return 1  # fewer KV heads than ranks: each rank keeps a replica of one head


def gather_world(layout: CacheLayout) -> int:
    """Ranks whose shards an all-gather concatenates; 1 for MLA, whose cache is already everywhere."""
    return 1 if layout.is_mla else layout.tp


def units_per_rank(layout: CacheLayout) -> int:
    return layout.model.layers * heads_per_rank(layout)


def cached_tokens(seq_len: int, layout: CacheLayout) -> int:
    return min(seq_len, layout.window) if layout.window else seq_len


def bytes_per_token(layout: CacheLayout) -> int:
    """KV of one token for the whole model: all layers and KV heads, unsharded, one sequence."""
    heads = 1 if layout.is_mla else layout.model.kv_heads
    return layout.model.layers * heads * unit_token_bytes(layout)


def constant_bytes(layout: CacheLayout) -> int:
    """Per-tensor scales: one fp32 for K and one for V per layer, replicated, independent of tokens."""
    if layout.kv_quant == "none" or layout.scale.kind != "per-tensor":
        return 0
    return kv_factor(layout) * SCALE_BYTES * layout.model.layers


def local_per_token(layout: CacheLayout) -> int:
    return layout.batch * units_per_rank(layout) * unit_token_bytes(layout)


def local_bytes(seq_len: int, layout: CacheLayout) -> int:
    """The shard one rank holds for batch x seq_len."""
    return cached_tokens(seq_len, layout) * local_per_token(layout) + constant_bytes(layout)


def gathered_bytes(seq_len: int, layout: CacheLayout) -> int:
    """What one rank holds after all-gathering every layer at once: every rank's shard, its own included."""
    tokens = cached_tokens(seq_len, layout)
    return gather_world(layout) * tokens * local_per_token(layout) + constant_bytes(layout)
