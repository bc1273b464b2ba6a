"""## What it does
Finds a collective argument that must be the same on every rank but is computed from the rank:
the root (`src` of `broadcast`/`scatter`, `dst` of `reduce`/`gather`), the reduce `op`, or the
group: the default (world) group on one rank and a subgroup of known members on another.

## Why is this bad?
Every rank must name the same root and the same reduction. With `broadcast(x, src=rank)` every
rank believes it is the source: nothing is exchanged, or the job hangs, depending on the backend.
With `op=SUM` on one rank and `op=MAX` on another, the result is undefined. A collective on the
world group and one on a subgroup never match: the rank on the world group waits for ranks that
are inside the other group's collective. Only groups created in the analysed code with known
members, fewer than the whole world, are compared with the default group: a group of unknown
origin (a parameter, an attribute) may be the default group itself.

## Example
```python
dist.broadcast(weights, src=dist.get_rank())
```

## Use instead
```python
dist.broadcast(weights, src=0)
```

## Fix safety
`--fix --unsafe-fixes` replaces a root that is the rank itself (`src=rank`,
`dst=dist.get_rank()`) by the rank the function singles out (`if rank == 3:`), or 0. Unsafe:
the data now flows from or to that rank.

## References
- PyTorch, `torch.distributed.broadcast`: "src (int) – Source rank" (the same on all ranks)
"""

from __future__ import annotations

from enum import Enum

from collcheck.checks._describe import op_name, ranks, where
from collcheck.findings import Finding, Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind

CODE = "CC006"
NAME = "rank-dependent-collective-argument"
SEVERITY = Severity.ERROR
CLAIMS = frozenset({DivergenceKind.ROOT, DivergenceKind.REDUCE_OP, DivergenceKind.GROUP})
PRECEDENCE = 60
ANCHOR = Anchor.ELEMENT
MESSAGE = (
    "{op} at {where} gets a different {argument} on rank {rank_x} ({value_x}) and rank {rank_y} "
    "({value_y}); it must be the same on every rank (world size {world})"
)

MESSAGE_GROUP = (
    "{op} at {where} runs on {value_x} on rank {rank_x} but on {value_y} on rank {rank_y}; "
    "every rank must issue it on the same group (world size {world})"
)

# How MESSAGE names each argument, by divergence kind.
ARGUMENTS = {DivergenceKind.ROOT: "root (src/dst)", DivergenceKind.REDUCE_OP: "reduce op"}


class Variant(Enum):
    """The shapes of this rule's findings, for the fixers (collcheck.adopt.fixers) to match on."""

    ROOT = "root"  # MESSAGE about the root (src/dst)
    REDUCE_OP = "reduce_op"  # MESSAGE about the reduce op
    GROUP = "group"  # MESSAGE_GROUP


# The shape of a MESSAGE finding, by the kind of divergence it describes.
SHAPES = {DivergenceKind.ROOT: Variant.ROOT, DivergenceKind.REDUCE_OP: Variant.REDUCE_OP}


def variant(finding: Finding) -> Variant | None:
    """Which of this rule's shapes `finding` is, from the arguments `describe` gave it."""
    args = dict(finding.message_args)
    if "argument" not in args:
        return Variant.GROUP if "value_x" in args else None
    return next((SHAPES[kind] for kind, shown in ARGUMENTS.items() if shown == args["argument"]), None)


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, at_high = ranks(d)
    assert at_low is not None
    if d.kind is DivergenceKind.GROUP:
        assert at_high is not None
        return MESSAGE_GROUP, {
            "op": op_name(at_low),
            "where": where(at_low)
            if at_low.line == at_high.line
            else f"{where(at_low)} and {where(at_high)}",
            "rank_x": str(low),
            "rank_y": str(high),
            "value_x": d.on_rank(d.argument, low),
            "value_y": d.on_rank(d.argument, high),
            "world": str(d.model.world),
        }
    return MESSAGE, {
        "op": op_name(at_low),
        "where": where(at_low),
        "argument": ARGUMENTS[d.kind],
        "rank_x": str(low),
        "rank_y": str(high),
        "value_x": d.on_rank(d.argument, low),
        "value_y": d.on_rank(d.argument, high),
        "world": str(d.model.world),
    }


# Before/after pairs for collcheck.adopt.fixers (tests/test_fixes.py): a root that is the rank itself
# becomes the rank the function singles out, or 0 (unsafe).
FIX_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "import torch.distributed as dist\n\n\ndef total(count):\n"
        "    dist.reduce(count, dst=dist.get_rank())\n    if dist.get_rank() == 0:\n        print(count)\n",
        "import torch.distributed as dist\n\n\ndef total(count):\n"
        "    dist.reduce(count, dst=0)\n    if dist.get_rank() == 0:\n        print(count)\n",
    ),
    (
        "import torch.distributed as dist\n\n\ndef share(t, rank):\n    dist.broadcast(t, src=rank)\n"
        "    if rank == 3:\n        print(t)\n",
        "import torch.distributed as dist\n\n\ndef share(t, rank):\n    dist.broadcast(t, src=3)\n"
        "    if rank == 3:\n        print(t)\n",
    ),
)
