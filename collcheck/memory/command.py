"""`collcheck estimate`: per-rank KV-cache and all-gather memory, and whether it fits a budget.

Exit status: 0 when the peak fits (or no budget was given), 1 when it does not, 2 on usage errors.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from collcheck.memory import formulas as f
from collcheck.memory.model_shape import MAX_FIELD, ModelConfigError, ModelShape, load_model, shape_by_hand
from collcheck.memory.plan import Estimate, GatherPlan, estimate
from collcheck.memory.report import to_json, to_text
from collcheck.memory.units import SizeError, parse_size

# For the command's registration (e.g. `epilog=EPILOG`): the exit codes, as `--help` should show them.
EPILOG = "Exit status: 0 if the peak fits the budget (or no --budget), 1 if it does not, 2 on usage errors."

MODEL_PANEL = "Model (a config.json, or by hand; flags override the config)"
CACHE_PANEL = "Cache"
GATHER_PANEL = "Gather"
OUTPUT_PANEL = "Budget and output"


class DType(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"
    int8 = "int8"


class KvQuant(str, Enum):
    none = "none"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"


class ChunkBy(str, Enum):
    layer = "layer"
    head = "head"


class GatherForm(str, Enum):
    tensor = "tensor"
    list = "list"


class Backend(str, Enum):
    nccl = "nccl"
    gloo = "gloo"
    hccl = "hccl"


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


class UsageError(ValueError):
    """Options that cannot be combined or read; reported with exit status 2."""


def _shape(
    model: Path | None,
    layers: int | None,
    heads: int | None,
    kv_heads: int | None,
    head_dim: int | None,
) -> ModelShape:
    if model is None:
        return shape_by_hand(layers, heads, kv_heads, head_dim)
    shape = load_model(model)
    if heads is not None and kv_heads is None and shape.kv_heads == shape.attention_heads:
        kv_heads = heads  # an MHA config overridden by --heads keeps one KV head per head
    return shape.with_changes(layers=layers, attention_heads=heads, kv_heads=kv_heads, head_dim=head_dim)


def _chunks(shape_layout: f.CacheLayout, chunks: int | None, chunk_by: ChunkBy | None) -> int:
    if chunks is not None and chunk_by is not None:
        raise UsageError("give --chunks or --chunk-by, not both")
    units = f.units_per_rank(shape_layout)
    if chunk_by is ChunkBy.layer:
        return min(shape_layout.model.layers, units)
    if chunk_by is ChunkBy.head:
        return units
    if chunks is not None and chunks > units:
        raise UsageError(f"--chunks {chunks} is more than the {units} layer-heads a rank holds")
    return chunks or 1


def _seq_len(seq_len: int | None, shape: ModelShape) -> int:
    if seq_len is not None:
        return seq_len
    if shape.max_position_embeddings is None:
        raise UsageError("give --seq-len (the config has no 'max_position_embeddings')")
    return shape.max_position_embeddings


def _window(window: int | None, shape: ModelShape) -> int | None:
    if window is None:
        return shape.sliding_window
    return window or None  # --window 0 turns a config's sliding window off


def _within_bounds(**flags: int | None) -> None:
    """The same ceiling as a config's fields: beyond it a size is not a model, only an overflow."""
    for name, value in flags.items():
        if value is not None and value > MAX_FIELD:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} is implausibly large (more than 2**{MAX_FIELD.bit_length() - 1})")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"collcheck: error: {message}", err=True)
    return typer.Exit(2)


def estimate_command(
    model: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH", help="A Hugging Face config.json, or its folder.", rich_help_panel=MODEL_PANEL
        ),
    ] = None,
    layers: Annotated[
        int | None, typer.Option(min=1, metavar="L", help="Transformer layers.", rich_help_panel=MODEL_PANEL)
    ] = None,
    heads: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="H",
            help="Attention heads (KV heads too, unless --kv-heads).",
            rich_help_panel=MODEL_PANEL,
        ),
    ] = None,
    kv_heads: Annotated[
        int | None, typer.Option(min=1, metavar="H", help="KV heads (GQA/MQA).", rich_help_panel=MODEL_PANEL)
    ] = None,
    head_dim: Annotated[
        int | None, typer.Option(min=1, metavar="D", help="Head dimension.", rich_help_panel=MODEL_PANEL)
    ] = None,
    seq_len: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="TOKENS",
            help="Tokens per sequence (default: the config's max_position_embeddings).",
            rich_help_panel=CACHE_PANEL,
        ),
    ] = None,
    batch: Annotated[
        int, typer.Option(min=1, metavar="B", help="Sequences per rank.", rich_help_panel=CACHE_PANEL)
    ] = 1,
    tp: Annotated[
        int,
        typer.Option(
            min=1,
            metavar="N",
            help="Tensor-parallel size: KV heads are split across this many ranks.",
            rich_help_panel=CACHE_PANEL,
        ),
    ] = 1,
    dtype: Annotated[
        DType | None,
        typer.Option(
            help="Cache element type (default: the config's torch_dtype, else fp16).",
            rich_help_panel=CACHE_PANEL,
        ),
    ] = None,
    kv_quant: Annotated[
        KvQuant, typer.Option(help="Quantize the cache.", rich_help_panel=CACHE_PANEL)
    ] = KvQuant.none,
    scale: Annotated[
        str,
        typer.Option(
            metavar="per-tensor|per-token-head|per-group:G",
            help="Where the fp32 scales of a quantized cache live.",
            rich_help_panel=CACHE_PANEL,
        ),
    ] = "per-token-head",
    window: Annotated[
        int | None,
        typer.Option(
            min=0,
            metavar="TOKENS",
            help="Keep only the last TOKENS tokens (default: the config's sliding_window; 0: none).",
            rich_help_panel=CACHE_PANEL,
        ),
    ] = None,
    chunks: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="C",
            help="All-gather the cache in C pieces, one alive at a time.",
            rich_help_panel=GATHER_PANEL,
        ),
    ] = None,
    chunk_by: Annotated[
        ChunkBy | None,
        typer.Option(help="One chunk per layer, or per layer and head.", rich_help_panel=GATHER_PANEL),
    ] = None,
    gather: Annotated[
        GatherForm,
        typer.Option(
            help="all_gather_into_tensor (tensor) or all_gather into a list (list).",
            rich_help_panel=GATHER_PANEL,
        ),
    ] = GatherForm.tensor,
    backend: Annotated[
        Backend,
        typer.Option(
            help="gloo also adds a flat temporary to the tensor form.", rich_help_panel=GATHER_PANEL
        ),
    ] = Backend.nccl,
    budget: Annotated[
        str | None,
        typer.Option(
            metavar="SIZE",
            help="Memory per rank: 16GiB, 17GB, 512MiB or bytes. Exit status 1 if the peak exceeds it.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", help="Output format.", rich_help_panel=OUTPUT_PANEL)
    ] = OutputFormat.text,
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.png",
            help="Also plot peak against sequence length (needs matplotlib).",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
) -> None:
    """Estimate per-rank KV-cache and all-gather memory, and whether it fits a budget.

    Exit status: 0 if the peak fits the budget (or no --budget), 1 if it does not, 2 on usage errors.
    """
    try:
        _within_bounds(
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            seq_len=seq_len,
            batch=batch,
            tp=tp,
            window=window,
            chunks=chunks,
        )
        shape = _shape(model, layers, heads, kv_heads, head_dim)
        layout = f.CacheLayout(
            model=shape,
            tp=tp,
            batch=batch,
            dtype=(dtype.value if dtype else shape.dtype) or "fp16",
            kv_quant=kv_quant.value,
            scale=f.parse_scale(scale),
            window=_window(window, shape),
        )
        plan = GatherPlan(chunks=_chunks(layout, chunks, chunk_by), form=gather.value, backend=backend.value)
        budget_bytes = None if budget is None else parse_size(budget)
        result = estimate(_seq_len(seq_len, shape), layout, plan, budget_bytes)
        report = _render(result, output_format)
    except (ModelConfigError, f.LayoutError, SizeError, UsageError) as error:
        raise _fail(str(error)) from error
    except OverflowError as error:  # sizes past what a float holds: only absurd flags get here
        raise _fail(f"the sizes are too large to estimate ({error})") from error
    typer.echo(report)
    if plot is not None:
        _plot(result, plot)
    raise typer.Exit(1 if result.fits is False else 0)


def _render(result: Estimate, output_format: OutputFormat) -> str:
    if output_format is OutputFormat.json:
        return json.dumps(to_json(result), indent=2)
    return to_text(result)


def _plot(result: Estimate, path: Path) -> None:
    from collcheck.memory.plot import PlotError, write_plot

    try:
        write_plot(result, path)
    except PlotError as error:
        raise _fail(str(error)) from error
