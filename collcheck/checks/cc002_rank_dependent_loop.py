"""## What it does
Finds a loop that issues collectives and whose number of iterations depends on the rank:
`for i in range(rank + 1)`, `for item in items[rank::world_size]` when the items do not divide
evenly, or a `while` whose condition is computed from the rank.

## Why is this bad?
Every iteration issues the body's collectives. A rank that iterates one time more than the others
waits forever for partners that have already left the loop; the job hangs until the
process-group timeout.

## Example
```python
for batch in shards[rank::world_size]:   # 10 shards on 4 ranks: 3, 3, 2, 2 iterations
    loss = step(batch)
    dist.all_reduce(loss)
```

## Use instead
```python
steps = math.ceil(len(shards) / world_size)   # the same on every rank
for i in range(steps):
    index = rank + i * world_size
    loss = step(shards[index]) if index < len(shards) else torch.zeros(())
    dist.all_reduce(loss)
```
Make the trip count uniform (pad, or agree on it with an all_reduce of the local count using
`MIN`/`MAX`), or use `torch.distributed.algorithms.Join` for uneven inputs.

## References
- PyTorch, *Distributed training with uneven inputs using the Join context manager*
"""

from __future__ import annotations

from collcheck.checks._describe import loop_assumption, op_name, ranks
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind

CODE = "CC002"
NAME = "rank-dependent-loop"
SEVERITY = Severity.ERROR
CLAIMS = frozenset({DivergenceKind.TRIP})
PRECEDENCE = 50
ANCHOR = Anchor.LOOP
MESSAGE = (
    "the loop issuing {ops} runs a rank-dependent number of times: {trips_x} on rank {rank_x}, "
    "{trips_y} on rank {rank_y} (world size {world})"
)


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, _ = ranks(d)
    return MESSAGE, {
        "ops": op_name(at_low).removeprefix("loop of ") + loop_assumption(at_low),
        "rank_x": str(low),
        "rank_y": str(high),
        "trips_x": d.on_rank(d.trips, low),
        "trips_y": d.on_rank(d.trips, high),
        "world": str(d.model.world),
    }
