"""## What it does
Finds collectives skipped, repeated or reached on some ranks only because of a decision taken on
this rank's own data — a value the code itself hands to a combining collective (an all-reduce
with MAX or SUM, an all-gather), which says that it differs between ranks: a local count of
items, tokens or requests, an empty local batch, a per-rank shard's length. A decision taken on
the combined value (after the collective) is the same on every rank and is not reported.

The evidence may lie in a helper or a framework's gather or reduce: a function whose parameter
(or an attribute of it, `plan.num_tokens`, or of `self`) is all that flows into a combining
collective makes what its callers pass there their own data, and a function run on its own
takes such parameters so; a tensor of the entries a mask selects, gathered whole, is its own too.
Only a decision taken before the call that combines the data is reported, not one taken after
the statement that combines it on some paths (`if dp > 1: n = agree(n)`).

A value is taken as this rank's own only where it is all that flows into its element of what is
combined (`n` of `torch.tensor([n, world])`), not one input among several (a group size mixed
with the rank into an offset, a config field beside a layout in one record, a size that scales a
local norm: `x /= tp_size`); and never where it was computed only from what a collective
delivered (a loop over an all-gathered list, an item of a broadcast list, a reduced count).

A module trained data-parallel by hand (its parameters' gradients all-reduced by the code, in the
function or a helper handed the module) runs on each rank's own inputs, as a DDP-wrapped one: its
output (a loss, a local evaluation score, also through an unknown helper handed the module) is
this rank's own data, so a skip on a non-finite loss or an early stop on a local metric is found.

On by default since its evidence became precise: a whole sequence made into a tensor for an
element-wise collective is as long on every rank (only its entries are this rank's own), and data
that neither rank's path combines (a helper that combines it only where the group has other
members) parts no ranks. `ignore = ["CC008"]` turns it off.

## Why is this bad?
Ranks hold different data. When one rank's batch is empty and it returns early, or loops once
per local item around a collective, the others wait in a collective that rank never issues: the
job hangs, typically only on the last, uneven batch of an epoch.

## Example
```python
def pad_steps(batches, t):
    local_steps = len(batches)
    if local_steps == 0:          # this rank's own count
        return
    steps = torch.tensor([local_steps])
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    for _ in range(int(steps.item())):
        dist.all_reduce(t)
```

## Use instead
```python
def pad_steps(batches, t):
    steps = torch.tensor([len(batches)])
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)   # decide on the combined count
    for _ in range(int(steps.item())):
        dist.all_reduce(t)
```

## References
- PyTorch, `torch.distributed.algorithms.Join` for uneven inputs
"""

from __future__ import annotations

from collcheck.checks._describe import describe_element, ranks
from collcheck.checks.cc007_per_process_value_guard import cause as cause  # the guard, as for CC007
from collcheck.checks.cc007_per_process_value_guard import what_varies
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind, PerProcess

CODE = "CC008"
NAME = "per-rank-data-guard"
SEVERITY = Severity.WARNING
CLAIMS = frozenset(DivergenceKind)
PRECEDENCE = 9  # before CC007, which reports every other per-process value
ANCHOR = Anchor.GUARD
MESSAGE = (
    "whether {element} runs depends on {what}, so ranks {rank_x} and {rank_y} can disagree; decide "
    "on the combined value instead"
)
MESSAGE_EXIT = (
    "whether `{exit}` at {where} is taken depends on {what}, so ranks {rank_x} and {rank_y} can "
    "disagree, and it skips {element}; decide on the combined value instead"
)


def applies(d: Divergence) -> bool:
    return d.nondet_only and d.per_process is PerProcess.OWN_DATA


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, at_high = ranks(d)
    element = at_low if at_low is not None else at_high
    common = {"what": what_varies(d), "rank_x": str(low), "rank_y": str(high)}
    if d.exit is not None and element is not None:
        where = f"{d.exit.path.rsplit('/', 1)[-1]}:{d.exit.line}"
        return MESSAGE_EXIT, {
            "exit": d.exit.kind.value,
            "where": where,
            "element": describe_element(element),
            **common,
        }
    text = f"`{d.exit.kind.value}`" if element is None and d.exit is not None else describe_element(element)
    return MESSAGE, {"element": text, **common}
