"""The attention shape of a model, read from a Hugging Face `config.json` or given by hand.

Only what sizes the KV cache matters: layers, KV heads, head dim, the MLA latent (DeepSeek-V2/V3),
a sliding window and the checkpoint's dtype. Field names are those that real configs carry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from collcheck.source import MAX_CONFIG_BYTES, FileRefused, read_regular_file

# Hugging Face `torch_dtype` spellings -> the estimator's names.
_TORCH_DTYPES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "int8": "int8",
}


# No real layer count, head count, width or context length comes near this; the products of such
# fields stay far inside what a float (the report's GiB) can hold.
MAX_FIELD = 2**40


class ModelConfigError(ValueError):
    """A config that lacks a field the estimate needs, or holds an unusable value."""


@dataclass(frozen=True)
class MlaShape:
    """Multi-head latent attention: one compressed latent plus the decoupled RoPE key per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    @property
    def width(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    mla: MlaShape | None = None
    sliding_window: int | None = None
    dtype: str | None = None  # the checkpoint's dtype in estimator names (fp16, bf16, ...)
    max_position_embeddings: int | None = None

    def with_changes(self, **changes: Any) -> ModelShape:
        return replace(self, **{key: value for key, value in changes.items() if value is not None})


def _positive_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"'{key}' must be a positive integer, not {_shown(value)}")
    if value > MAX_FIELD:
        raise ModelConfigError(f"'{key}' is implausibly large (more than 2**{MAX_FIELD.bit_length() - 1})")
    return value


def _shown(value: Any) -> str:
    """A config value in an error message, cut short (a hostile config may hold anything)."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 64 else "a huge integer"
    return text if len(text) <= 40 else text[:37] + "..."


def _required(data: Mapping[str, Any], key: str, where: str) -> int:
    value = _positive_int(data, key)
    if value is None:
        raise ModelConfigError(f"{where} has no '{key}'")
    return value


def _head_dim(data: Mapping[str, Any], heads: int, where: str) -> int:
    explicit = _positive_int(data, "head_dim")
    if explicit is not None:
        return explicit
    hidden = _positive_int(data, "hidden_size")
    if hidden is None:
        raise ModelConfigError(f"{where} has neither 'head_dim' nor 'hidden_size'")
    if hidden % heads:
        raise ModelConfigError(
            f"{where}: 'hidden_size' {hidden} is not a multiple of 'num_attention_heads' {heads}; "
            "give 'head_dim'"
        )
    return hidden // heads


def _mla(data: Mapping[str, Any]) -> MlaShape | None:
    rank = _positive_int(data, "kv_lora_rank")
    if rank is None:
        return None
    rope = _positive_int(data, "qk_rope_head_dim")
    if rope is None:
        raise ModelConfigError("an MLA config ('kv_lora_rank') also needs 'qk_rope_head_dim'")
    return MlaShape(kv_lora_rank=rank, qk_rope_head_dim=rope)


def _window(data: Mapping[str, Any]) -> int | None:
    # Qwen2-style configs carry a sliding_window that is switched off by use_sliding_window.
    if data.get("use_sliding_window") is False:
        return None
    return _positive_int(data, "sliding_window")


def _dtype(data: Mapping[str, Any]) -> str | None:
    raw = data.get("torch_dtype", data.get("dtype"))
    return _TORCH_DTYPES.get(raw) if isinstance(raw, str) else None


def shape_from_config(data: Mapping[str, Any], name: str = "config.json") -> ModelShape:
    """Read a parsed config.json. Multimodal configs keep the language model under `text_config`."""
    text_config = data.get("text_config")
    if "num_hidden_layers" not in data and isinstance(text_config, Mapping):
        data = text_config
    layers = _required(data, "num_hidden_layers", name)
    heads = _required(data, "num_attention_heads", name)
    kv_heads = _positive_int(data, "num_key_value_heads") or heads
    mla = _mla(data)
    head_dim = mla.width if mla is not None else _head_dim(data, heads, name)
    return ModelShape(
        name=name,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        mla=mla,
        sliding_window=_window(data),
        dtype=_dtype(data),
        max_position_embeddings=_positive_int(data, "max_position_embeddings"),
    )


def load_model(path: Path) -> ModelShape:
    """Read `config.json` (or a folder holding one)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(read_regular_file(file, MAX_CONFIG_BYTES).decode("utf-8"))
    except FileRefused as refused:
        raise ModelConfigError(f"cannot read {file}: {refused}") from refused
    except OSError as error:
        raise ModelConfigError(f"cannot read {file}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise ModelConfigError(f"{file} is not UTF-8 text: {error}") from error
    except ValueError as error:  # malformed JSON, or an integer literal of thousands of digits
        raise ModelConfigError(f"{file} is not valid JSON: {error}") from error
    except RecursionError as error:
        raise ModelConfigError(f"{file} is nested too deeply to read") from error
    if not isinstance(data, dict):
        raise ModelConfigError(f"{file} does not hold a JSON object")
    return shape_from_config(data, name=str(file))


def shape_by_hand(
    layers: int | None, heads: int | None, kv_heads: int | None, head_dim: int | None
) -> ModelShape:
    """`--layers/--heads/--kv-heads/--head-dim` without a config: every field must be given."""
    if layers is None:
        raise ModelConfigError("give --model PATH, or --layers")
    if heads is None and kv_heads is None:
        raise ModelConfigError("give --model PATH, or --kv-heads (or --heads)")
    if head_dim is None:
        raise ModelConfigError("give --model PATH, or --head-dim")
    kv = kv_heads if kv_heads is not None else heads
    assert kv is not None  # narrowed above; mypy cannot follow the pair
    return ModelShape(
        name="by hand", layers=layers, attention_heads=heads or kv, kv_heads=kv, head_dim=head_dim
    )
