"""## What it does
Finds a `return`, `break`, `continue`, `raise` or `sys.exit()` taken on some ranks only, which
skips collectives that the other ranks still issue — including an `except ...: continue` that a
rank takes when its own data raises.

## Why is this bad?
The ranks that left early never join the collectives that follow; the ranks that stayed wait for
them until the process-group timeout. Early exits are easy to miss in review because the
collective that hangs is far from the `return` that causes it.

## Example
```python
def evaluate(model, rank):
    if rank != 0:
        return            # ranks 1.. leave here
    metrics = compute(model)
    dist.all_reduce(metrics)   # rank 0 waits forever
```

## Use instead
```python
def evaluate(model, rank):
    metrics = compute(model)
    dist.all_reduce(metrics)
    if rank != 0:
        return
    log(metrics)
```
Issue the collectives before the rank-dependent exit, or have every rank agree on leaving (for
example by all-reducing a "stop" flag).

## References
- PyTorch forums and issues on hangs caused by early returns in rank-0-only code paths
"""

from __future__ import annotations

from pathlib import Path

from collcheck.checks._describe import describe_element, ranks
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind, PerProcess
from collcheck.static.program import ExitKind

CODE = "CC003"
NAME = "rank-dependent-early-exit"
SEVERITY = Severity.ERROR
CLAIMS = frozenset({DivergenceKind.SEQUENCE, DivergenceKind.LOOP_EXIT})
PRECEDENCE = 40  # before CC001: a sequence cut short by an exit is the exit's fault
ANCHOR = Anchor.EXIT
# An exit in a helper ends only the helper: its callers see the ranks issue different sequences
# (CC001). That is this finding's cause, reported once, at the exit (collcheck.classify).
EXPLAINS = frozenset({"CC001"})
MESSAGE = (
    "`{exit}` at {where} is taken by rank {rank_x} but not by rank {rank_y}, skipping {skipped} "
    "(world size {world})"
)
MESSAGE_EXCEPTION = (
    "an exception caught here makes a rank `{exit}` while the others go on to {skipped}: "
    "the ranks that did not fail wait forever"
)

MESSAGE_PASSED = (
    "a rank whose call raised goes on from the `except` clause while the others `{exit}` here: "
    "the exception parts them, and the failed rank goes on to {skipped} alone"
)


def applies(d: Divergence) -> bool:
    return d.exit is not None


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    assert d.exit is not None
    _low, _high, _at_low, _at_high = ranks(d)
    exiting_is_a = d.exit is (d.path_a.exit)
    rank_exit = d.model.rank_a if exiting_is_a else d.model.rank_b
    rank_other = d.model.rank_b if exiting_is_a else d.model.rank_a
    skipped_element = d.event_b if exiting_is_a else d.event_a
    skipped = (
        describe_element(skipped_element)
        if skipped_element is not None
        else "the next iteration's collectives"
    )
    exit_word = "sys.exit()" if d.exit.kind is ExitKind.EXIT else d.exit.kind.value
    if d.per_process is PerProcess.EXCEPTION and not d.exit_after_failure:
        return MESSAGE_PASSED, {"exit": exit_word, "skipped": skipped}
    if d.per_process is PerProcess.EXCEPTION:
        return MESSAGE_EXCEPTION, {"exit": exit_word, "skipped": skipped}
    return MESSAGE, {
        "exit": exit_word,
        "where": f"{Path(d.exit.path).name}:{d.exit.line}",
        "rank_x": str(rank_exit),
        "rank_y": str(rank_other),
        "skipped": skipped,
        "world": str(d.model.world),
    }
