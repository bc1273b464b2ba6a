"""The estimator's figures against numbers published elsewhere, read from fixtures/models/*.json."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from collcheck.memory import formulas as f
from collcheck.memory.formulas import CacheLayout, LayoutError, Scale, parse_scale
from collcheck.memory.model_shape import ModelConfigError, load_model, shape_by_hand, shape_from_config
from collcheck.memory.plan import GatherPlan, advise, estimate, max_seq_len, peak_bytes
from collcheck.memory.units import GIB, SizeError, describe, parse_size

MODELS = Path(__file__).resolve().parent.parent / "fixtures" / "models"


def layout(name: str, **changes: object) -> CacheLayout:
    model = load_model(MODELS / name)
    base = CacheLayout(model=model, dtype=model.dtype or "fp16")
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("llama-2-7b.json", 524_288),  # 32 layers x 32 KV heads x 128 x 2 (K, V) x 2 bytes
        ("llama-3-8b.json", 131_072),  # 8 KV heads (GQA)
        ("llama-3-70b.json", 327_680),  # 80 layers, 8 KV heads
        ("llama-3.1-8b.json", 131_072),
        ("deepseek-v3.json", 70_272),  # MLA: 61 layers x (512 + 64), no factor 2
        ("mistral-7b-v0.1.json", 131_072),
    ],
)
def test_bytes_per_token_of_published_configs_in_bf16(config: str, expected: int) -> None:
    assert f.bytes_per_token(layout(config, dtype="bf16")) == expected


def test_configs_are_read_as_published() -> None:
    llama2 = load_model(MODELS / "llama-2-7b.json")
    assert (llama2.layers, llama2.kv_heads, llama2.head_dim, llama2.dtype) == (32, 32, 128, "fp16")
    deepseek = load_model(MODELS / "deepseek-v3.json")
    assert deepseek.mla is not None
    assert (deepseek.mla.kv_lora_rank, deepseek.mla.qk_rope_head_dim) == (512, 64)
    assert (deepseek.layers, deepseek.head_dim) == (61, 576)
    mistral = load_model(MODELS / "mistral-7b-v0.1.json")
    assert mistral.sliding_window == 4096


def test_vllm_logged_capacity_for_llama_3_1_8b() -> None:
    # vLLM logs "# GPU blocks: 1952" for Llama-3.1-8B: 1,952 blocks of 16 tokens.
    cache = layout("llama-3.1-8b.json")
    tokens = 1952 * 16
    assert tokens == 31_232
    assert f.local_bytes(tokens, cache) == 4_093_640_704 == int(3.8125 * GIB)
    assert 4_093_640_704 // f.bytes_per_token(cache) == 31_232


def test_seed_warning_one_is_4_gib_for_one_layer() -> None:
    # 2 x N x S x H x D x 2 bytes = 2 x 8 x 32768 x 32 x 128 x 2: H = 32 heads on each of 8 cards.
    seed = layout("seed-warning-1.json", tp=8)
    assert f.heads_per_rank(seed) == 32
    assert f.gathered_bytes(32_768, seed) == 4_294_967_296 == 4 * GIB
    assert f.local_bytes(32_768, seed) == 536_870_912
    assert peak_bytes(32_768, seed, GatherPlan()) == 4_831_838_208  # shard + output
    assert round(4_294_967_296 / 1e9, 1) == 4.3  # the article's "4.3 GB": decimal units
    # One layer only: the 32-layer model would need 32 times as much.
    model = replace(seed, model=replace(seed.model, layers=32))
    assert f.gathered_bytes(32_768, model) == 128 * GIB


def test_gqa_with_fewer_kv_heads_than_ranks_replicates_one_head() -> None:
    cache = layout("llama-3-70b.json", tp=16)
    assert f.heads_per_rank(cache) == 1
    assert f.local_bytes(1, cache) == 80 * 2 * 128 * 2  # one head per layer, K and V
    assert f.gathered_bytes(1, cache) == 16 * 80 * 2 * 128 * 2


def test_mla_is_replicated_and_not_gathered() -> None:
    cache = layout("deepseek-v3.json", tp=8)
    assert f.local_bytes(1000, cache) == f.gathered_bytes(1000, cache) == 70_272_000
    assert peak_bytes(1000, cache, GatherPlan()) == 70_272_000


def test_tp_that_does_not_divide_the_heads_is_an_error() -> None:
    with pytest.raises(LayoutError, match="does not divide"):
        f.heads_per_rank(layout("llama-3-8b.json", tp=3))


@pytest.mark.parametrize(
    ("quant", "scale", "row"),
    [
        ("int8", "per-token-head", 128 + 4),  # D + 4 bytes per token-head
        ("fp8", "per-tensor", 128),
        ("int4", "per-group:32", 64 + 4 * 4),
        ("int4", "per-token-head", 64 + 4),
    ],
)
def test_quantized_rows_carry_their_scales(quant: str, scale: str, row: int) -> None:
    cache = layout("llama-3-8b.json", kv_quant=quant, scale=parse_scale(scale))
    assert f.row_bytes(128, cache) == row
    assert f.bytes_per_token(cache) == 32 * 8 * 2 * row


def test_per_tensor_scales_are_a_constant() -> None:
    cache = layout("llama-3-8b.json", kv_quant="fp8", scale=Scale("per-tensor"))
    assert f.constant_bytes(cache) == 32 * 2 * 4
    assert f.local_bytes(10, cache) == 10 * 65_536 + 256


def test_chunking_divides_the_gathered_part_of_the_peak() -> None:
    cache = layout("llama-3-8b.json", tp=8)  # 1 KV head per rank: 32 units
    local = f.local_bytes(131_072, cache)
    assert local == 2 * GIB
    assert peak_bytes(131_072, cache, GatherPlan()) == 2 * GIB + 16 * GIB
    assert peak_bytes(131_072, cache, GatherPlan(chunks=32)) == 2 * GIB + GIB // 2
    # ceil(32 / 5) = 7 units per chunk
    assert peak_bytes(131_072, cache, GatherPlan(chunks=5)) == 2 * GIB + 7 * GIB // 2


def test_max_seq_len_is_exact() -> None:
    cache = layout("llama-3-8b.json", tp=8)
    plan = GatherPlan()
    budget = 16 * GIB
    longest = max_seq_len(budget, cache, plan)
    assert longest == 116_508  # 16 GiB // (16,384 + 131,072) bytes per token
    assert peak_bytes(longest, cache, plan) <= budget < peak_bytes(longest + 1, cache, plan)


def test_window_makes_every_length_fit() -> None:
    cache = layout("mistral-7b-v0.1.json", tp=2, window=4096)
    assert f.local_bytes(32_768, cache) == f.local_bytes(4096, cache) == 268_435_456
    assert max_seq_len(GIB, cache, GatherPlan()) is None
    assert max_seq_len(GIB // 2, cache, GatherPlan()) == 2730  # (512 MiB) // (65,536 + 131,072)


def test_advice_is_the_smallest_change_that_fits() -> None:
    cache = layout("llama-3-8b.json", tp=8)
    advice = advise(131_072, 16 * GIB, cache, GatherPlan())
    assert [a.change for a in advice] == ["chunks", "kv-quant", "window"]
    assert advice[0].flags == "--chunks 2" and advice[0].peak_bytes == 10 * GIB
    assert advice[1].flags == "--kv-quant fp8 --scale per-tensor" and advice[1].peak_bytes == 9 * GIB + 256
    assert advice[2].flags == "--window 116508"
    assert all(a.peak_bytes <= 16 * GIB for a in advice)


def test_list_form_advice_switches_to_tensor() -> None:
    cache = layout("seed-warning-1.json", tp=8)
    advice = advise(32_768, 5 * GIB, cache, GatherPlan(form="list"))
    assert [(a.change, a.flags, a.peak_bytes) for a in advice][:2] == [
        ("chunks", "--chunks 2", 4_831_838_208),
        ("gather", "--gather tensor", 4_831_838_208),
    ]


def test_estimate_without_budget_has_no_verdict() -> None:
    result = estimate(1, layout("llama-2-7b.json"), GatherPlan(), None)
    assert (result.fits, result.max_seq_len, result.advice) == (None, None, ())


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16GiB", 17_179_869_184),
        ("17GB", 17_000_000_000),
        ("512MiB", 536_870_912),
        ("1024", 1024),
        ("1.5 GiB", 1_610_612_736),
        ("4.3GB", 4_300_000_000),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["16G", "lots", "-1GiB", "GiB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(SizeError):
        parse_size(text)


def test_describe_gives_gib_and_exact_bytes() -> None:
    assert describe(4_294_967_296) == "4 GiB (4,294,967,296 bytes)"


def test_missing_config_fields_are_named() -> None:
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        shape_from_config({"num_attention_heads": 8})
    with pytest.raises(ModelConfigError, match="head_dim"):
        shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 8})
    with pytest.raises(ModelConfigError, match="--head-dim"):
        shape_by_hand(2, 8, None, None)


def test_head_dim_defaults_to_hidden_over_heads_and_kv_heads_to_heads() -> None:
    shape = shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 1024})
    assert (shape.kv_heads, shape.head_dim) == (8, 128)


def test_sliding_window_switched_off_is_ignored() -> None:
    data = {"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64, "sliding_window": 4096}
    assert shape_from_config(data).sliding_window == 4096
    assert shape_from_config({**data, "use_sliding_window": False}).sliding_window is None
