"""## What it does
Finds a collective argument that must be the same on every rank but is computed from the rank:
the root (`src` of `broadcast`/`scatter`, `dst` of `reduce`/`gather`) or the reduce `op`.

## Why is this bad?
Every rank must name the same root and the same reduction. With `broadcast(x, src=rank)` every
rank believes it is the source: nothing is exchanged, or the job hangs, depending on the backend.
With `op=SUM` on one rank and `op=MAX` on another, the result is undefined.

## Example
```python
dist.broadcast(weights, src=dist.get_rank())
```

## Use instead
```python
dist.broadcast(weights, src=0)
```

## References
- PyTorch, `torch.distributed.broadcast`: "src (int) – Source rank" (the same on all ranks)
"""

from __future__ import annotations

from collcheck.checks._describe import op_name, ranks, where
from collcheck.findings import Severity
from collcheck.static.solve import Divergence

CODE = "CC006"
NAME = "rank-dependent-collective-argument"
SEVERITY = Severity.ERROR
MESSAGE = (
    "{op} at {where} gets a different {argument} on rank {rank_x} ({value_x}) and rank {rank_y} "
    "({value_y}); it must be the same on every rank (world size {world})"
)

_ARGUMENT = {"root": "root (src/dst)", "reduce_op": "reduce op"}


def applies(d: Divergence) -> bool:
    return d.kind in ("root", "reduce_op")


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, _ = ranks(d)
    values = dict(d.model.values)
    assert at_low is not None
    return MESSAGE, {
        "op": op_name(at_low),
        "where": where(at_low),
        "argument": _ARGUMENT[d.kind],
        "rank_x": str(low),
        "rank_y": str(high),
        "value_x": values.get(f"{d.kind} on rank {low}", "?"),
        "value_y": values.get(f"{d.kind} on rank {high}", "?"),
        "world": str(d.model.world),
    }
