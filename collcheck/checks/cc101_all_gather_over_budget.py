"""## What it does
Flags an all-gather whose per-rank footprint exceeds the memory budget, when that footprint can be
computed from the source: literals, module constants, and the symbols bound in
`[tool.collcheck.memory]` (`seq_len`, `n_heads`, `head_dim`, `world_size`, `dtype`, `budget`, ...).
The footprint counts the gathered output, the input shard, the flat temporary of list-form
`all_gather`, tensors that stay in use, every layer kept alive by a loop that appends each gathered
layer to a list, and the extra copy made by `torch.cat` of gathered chunks. The message gives the
figure and the change that brings it under the budget: chunk by layer, quantize, or window.

## Why is this bad?
An all-gather multiplies the shard by the number of ranks. Gathering a head-sharded KV cache on 8
ranks at 32K tokens needs `2 × N × S × H × D × 2` bytes per layer (4 GiB for H = 32 heads per
rank, D = 128, fp16), and keeping every layer's gathered cache, or concatenating the chunks, multiplies
it again: the job runs out of memory at the long sequences it was meant for.

## Example
```python
# pyproject.toml: [tool.collcheck.memory] seq_len = 32768, n_heads = 256, head_dim = 128,
#                 world_size = 8, layers = 32, budget = "16GiB"
gathered = []
for layer in range(layers):
    full_k = torch.zeros(seq_len, n_heads, head_dim, dtype=torch.float16)
    dist.all_gather_into_tensor(full_k, local_k[layer])
    gathered.append(full_k)
```

## Use instead
Gather one layer at a time and use it before gathering the next:
```python
for layer in range(layers):
    full_k = torch.zeros(seq_len, n_heads, head_dim, dtype=torch.float16)
    dist.all_gather_into_tensor(full_k, local_k[layer])
    attend(layer, full_k)
```
or quantize the cache (int8 halves fp16), or keep a window of recent tokens. `collcheck estimate`
gives the exact peak and the smallest change that fits.

## References
- [torch.distributed.all_gather_into_tensor](https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_gather_into_tensor)
- `collcheck estimate --help`; docs/memory.md
"""

from __future__ import annotations

from collections.abc import Mapping

from collcheck.findings import Finding, Severity
from collcheck.memory.gather_sites import GatherSite, gather_sites
from collcheck.memory.static_sizes import budget_bytes, memory_symbols
from collcheck.memory.units import describe, gib
from collcheck.static.context import ModuleContext

CODE = "CC101"
NAME = "all-gather-over-budget"
SEVERITY = Severity.ERROR
MESSAGE = "{op} needs {footprint} per rank here, over the {budget} budget; {advice}"

SEQ_LEN = "seq_len"


def _site_key(site: GatherSite) -> tuple[int, int]:
    return (site.node.lineno, site.node.col_offset)


def _windows(
    context: ModuleContext, symbols: Mapping[str, int | str], budget: int
) -> dict[tuple[int, int], int]:
    """The longest `seq_len` that fits, per site, where the footprint is linear in `seq_len`."""
    seq_len = symbols.get(SEQ_LEN)
    if not isinstance(seq_len, int) or seq_len <= 0:
        return {}
    at = {
        n: {_site_key(s): s.footprint for s in gather_sites(context, {**symbols, SEQ_LEN: n})} for n in (0, 1)
    }
    at_seq = {_site_key(s): s.footprint for s in gather_sites(context, symbols)}
    windows: dict[tuple[int, int], int] = {}
    for key, full in at_seq.items():
        base, slope = at[0].get(key), None
        if base is not None and key in at[1]:
            slope = at[1][key] - base
        if base is None or not slope or slope <= 0 or base + slope * seq_len != full or base > budget:
            continue  # not linear in seq_len, or over budget whatever the length
        windows[key] = (budget - base) // slope
    return windows


def advice(site: GatherSite, budget: int, window: int | None) -> str:
    steps: list[str] = []
    if site.one_iteration is not None and site.one_iteration < site.footprint:
        fits = "fits" if site.one_iteration <= budget else "still over"
        one = gib(site.one_iteration)
        steps.append(f"chunk by layer: use each gathered layer before gathering the next ({one}, {fits})")
    else:
        steps.append("all-gather in chunks (per layer or head) and drop each before the next")
    if site.itemsize > 1:
        steps.append(f"quantize to int8 (about {gib(site.footprint // site.itemsize)} before scales)")
    if window:
        steps.append(f"or keep a window of at most {window:,} tokens (seq_len)")
    return "; ".join(steps)


def check_module(context: ModuleContext) -> list[Finding]:
    settings = context.settings.memory_settings()
    budget = budget_bytes(settings)
    if budget is None:
        return []  # without a budget there is nothing to compare against
    symbols = memory_symbols(settings)
    over = [site for site in gather_sites(context, symbols) if site.footprint > budget]
    if not over:
        return []
    windows = _windows(context, symbols, budget)
    findings = []
    for site in over:
        args = {
            "op": site.qualified_op,
            "footprint": describe(site.footprint),
            "budget": gib(budget),
            "advice": advice(site, budget, windows.get(_site_key(site))),
        }
        findings.append(
            Finding(
                code=CODE,
                severity=SEVERITY,
                location=context.location(site.node),
                message_template=MESSAGE,
                message_args=tuple(sorted(args.items())),
                function=site.function,
            )
        )
    return findings
