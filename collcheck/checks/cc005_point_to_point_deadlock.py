"""## What it does
Finds blocking point-to-point calls (`send`/`recv`, `send_object_list`/`recv_object_list`) whose
order deadlocks: two ranks that each block sending to the other first, or each block receiving
from the other first. Non-blocking `isend`/`irecv` and `batch_isend_irecv` are not reported.

## Why is this bad?
A blocking `send` may not return until the peer posts the matching `recv`. When both peers send
first, both wait forever (with large messages on NCCL and gloo), and the hang appears only at
scale or with bigger tensors.

## Example
```python
peer = 1 - rank
dist.send(out, dst=peer)
dist.recv(inp, src=peer)
```

## Use instead
```python
if rank % 2 == 0:
    dist.send(out, dst=peer)
    dist.recv(inp, src=peer)
else:
    dist.recv(inp, src=peer)
    dist.send(out, dst=peer)
```
or post both at once: `dist.batch_isend_irecv([P2POp(dist.isend, out, peer), P2POp(dist.irecv, inp, peer)])`.

## References
- PyTorch, `torch.distributed.batch_isend_irecv`
"""

from __future__ import annotations

from collcheck.checks._describe import where
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind

CODE = "CC005"
NAME = "point-to-point-deadlock"
SEVERITY = Severity.ERROR
CLAIMS = frozenset({DivergenceKind.P2P})
PRECEDENCE = 20
ANCHOR = Anchor.ELEMENT
MESSAGE = (
    "ranks {rank_x} and {rank_y} both block in {op} towards each other first "
    "({where_x} and {where_y}): neither can proceed (world size {world})"
)


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    assert d.event_a is not None and d.event_b is not None
    return MESSAGE, {
        "rank_x": str(d.model.rank_a),
        "rank_y": str(d.model.rank_b),
        "op": d.event_a.op,
        "where_x": where(d.event_a),
        "where_y": where(d.event_b),
        "world": str(d.model.world),
    }
