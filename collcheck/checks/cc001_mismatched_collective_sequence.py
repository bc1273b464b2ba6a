"""## What it does
Finds code where two ranks of the same job issue different collective sequences: a collective
that some ranks issue and others skip, a different collective at the same position, or the same
collectives on the same operands in a different order.

## Why is this bad?
A collective completes only when every rank of its group calls the matching operation in the
same order. When rank 0 calls `barrier()` and rank 1 does not, rank 0 waits until the
process-group timeout (30 minutes by default with NCCL) and the job dies with an unhelpful
error. When two ranks reduce `A, B` and `B, A`, tensors of equal shape are silently summed with
the wrong partners.

## Example
```python
rank = dist.get_rank()
if rank == 0:
    dist.all_reduce(grad_a)
    dist.all_reduce(grad_b)
else:
    dist.all_reduce(grad_b)   # swapped: rank 1 reduces B against rank 0's A
    dist.all_reduce(grad_a)
```

## Use instead
```python
dist.all_reduce(grad_a)
dist.all_reduce(grad_b)
```
Issue the same collectives in the same order on every rank; put only the rank-specific work
(logging, saving) under `if rank == 0:`.

## Fix safety
`--fix --unsafe-fixes` moves a collective that is the last statement of a rank guard to after
the guard, so that every rank issues it (not when its arguments are computed inside the guard).
Unsafe: the other ranks now run it too, which is the point, but it changes what they run.

## References
- PyTorch, *Distributed communication package*: collectives must be called by all processes of
  the group, in the same order
- PARCOACH (static MPI collective verification)
"""

from __future__ import annotations

from enum import Enum

from collcheck.checks._describe import describe_element, op_name, ranks
from collcheck.findings import Finding, Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind

CODE = "CC001"
NAME = "mismatched-collective-sequence"
SEVERITY = Severity.ERROR
CLAIMS = frozenset({DivergenceKind.SEQUENCE, DivergenceKind.SWAP})
PRECEDENCE = 70  # the most general reading of a sequence difference: asked last
ANCHOR = Anchor.ELEMENT
MESSAGE = "rank {rank_x} issues {what_x} where rank {rank_y} issues {what_y} (world size {world})"
MESSAGE_MISSING = "{op} is issued by rank {rank_x} but not by rank {rank_y} (world size {world})"
MESSAGE_SWAPPED = (
    "ranks {rank_x} and {rank_y} issue {op} on the same operands in a different order "
    "({order_x} vs {order_y}): tensors are reduced with the wrong partners"
)


class Variant(Enum):
    """The shapes of this rule's findings, for the fixers (collcheck.adopt.fixers) to match on."""

    DIFFERENT = "different"  # MESSAGE: the ranks issue different collectives at one position
    MISSING = "missing"  # MESSAGE_MISSING: one rank issues a collective the other does not
    SWAPPED = "swapped"  # MESSAGE_SWAPPED: the same collectives in a different order


def variant(finding: Finding) -> Variant | None:
    """Which of this rule's shapes `finding` is, from the arguments `describe` gave it (the engine
    may reword the template itself: ranks among a group's members become local ranks)."""
    args = dict(finding.message_args)
    if "order_x" in args:
        return Variant.SWAPPED
    if "what_x" in args:
        return Variant.DIFFERENT
    return Variant.MISSING if "op" in args else None


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, at_high = ranks(d)
    world = str(d.model.world)
    if d.kind is DivergenceKind.SWAP:
        seq_low, seq_high = (
            (d.sequence_a, d.sequence_b) if d.model.rank_a == low else (d.sequence_b, d.sequence_a)
        )
        return MESSAGE_SWAPPED, {
            "rank_x": str(low),
            "rank_y": str(high),
            "op": op_name(at_low),
            "order_x": _order(seq_low),
            "order_y": _order(seq_high),
        }
    if at_low is None or at_high is None:
        present, absent = (high, low) if at_low is None else (low, high)
        element = at_high if at_low is None else at_low
        return MESSAGE_MISSING, {
            "op": describe_element(element),
            "rank_x": str(present),
            "rank_y": str(absent),
            "world": world,
        }
    return MESSAGE, {
        "rank_x": str(low),
        "rank_y": str(high),
        "what_x": describe_element(at_low),
        "what_y": describe_element(at_high),
        "world": world,
    }


def _order(sequence: tuple[object, ...]) -> str:
    parts = []
    for element in sequence:
        operands = getattr(element, "operands", ())
        if operands:
            parts.append(operands[0])
    return ", ".join(parts)


# Before/after pairs for collcheck.adopt.fixers (tests/test_fixes.py): the collective leaves the rank
# guard and is issued by every rank after it (unsafe).
FIX_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "import torch.distributed as dist\n\n\ndef save(state, path):\n    if dist.get_rank() == 0:\n"
        "        write(state, path)\n        dist.barrier()  # wait for the file\n    return path\n",
        "import torch.distributed as dist\n\n\ndef save(state, path):\n    if dist.get_rank() == 0:\n"
        "        write(state, path)\n    dist.barrier()  # wait for the file\n    return path\n",
    ),
    (
        "import torch.distributed as dist\n\n\ndef sync(rank):\n    if rank == 0:\n        dist.barrier()\n",
        "import torch.distributed as dist\n\n\ndef sync(rank):\n    dist.barrier()\n",
    ),
)
