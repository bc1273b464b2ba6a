"""## What it does
Finds collectives guarded by a value that differs from process to process without being the rank:
wall-clock time, random numbers, filesystem state (`os.path.exists`, file contents), the host
name, or the iteration order of a `set`. Values that went through a collective first (a
broadcast flag, an all-reduced decision) are the same everywhere and are not reported.
The finding is shown at the condition that reads the value (the guard; the `except` of a
per-process error), naming the collective or exit it decides, so a suppression on that line
covers the cause.

## Why is this bad?
Two processes never read the same clock, seldom see the same filesystem at the same instant,
and do not share a random state unless seeded identically. A collective issued "when 30 minutes
have passed" or "if the checkpoint exists" runs on some ranks and not on others — the cause of
many hangs that only happen in production. Set iteration order depends on each process's hash
seed, so ranks reduce different tensors at the same position.

## Example
```python
if time.time() - start > save_every:
    dist.barrier()
    save(model)
```

## Use instead
```python
flag = torch.tensor([time.time() - start > save_every], dtype=torch.int32)
dist.broadcast(flag, src=0)          # one decision, taken by rank 0, shared by all
if flag.item():
    dist.barrier()
    save(model)
```

## Fix safety
`--fix` iterates over `sorted(...)` instead of a set (safe). `--fix --unsafe-fixes` decides an
`if` whose test reads a per-process value on rank 0 and broadcasts it with
`broadcast_object_list` (unsafe: every rank follows rank 0's clock or filesystem).

## References
- PyTorch, *Reproducibility* notes on process-local random state
"""

from __future__ import annotations

from enum import Enum
from itertools import zip_longest
from pathlib import Path

from collcheck.checks._describe import describe_element, ranks
from collcheck.findings import ConditionKind, Finding, Location, Reason, Severity
from collcheck.static.anchor import Anchor, element_location
from collcheck.static.divergence import Divergence, DivergenceKind, PerProcess
from collcheck.static.program import Element, Region, RegionKind
from collcheck.static.why import ProcessRead, ReadsByRank

CODE = "CC007"
NAME = "per-process-value-guard"
SEVERITY = Severity.WARNING
# Any divergence that only per-process values (not the rank) explain, whatever its kind.
CLAIMS = frozenset(DivergenceKind)
PRECEDENCE = 10  # first: the cause (a per-process value) says more than the symptom
ANCHOR = Anchor.GUARD
MESSAGE = (
    "whether {element} runs depends on {what}, which differs between processes: ranks {rank_x} and "
    "{rank_y} can disagree; broadcast or all-reduce the decision first"
)
MESSAGE_EXIT = (
    "whether `{exit}` at {where} is taken depends on {what}, which differs between processes: "
    "ranks {rank_x} and {rank_y} can disagree, and it skips {element}; broadcast or all-reduce "
    "the decision first"
)
# The assumption a filesystem finding rests on, and the setting that states the opposite.
SHARED_FILESYSTEM_NOTE = (
    "; assumed to differ between nodes: if every rank reads one shared filesystem, "
    "set `shared-filesystem = true` in [tool.collcheck]"
)
MESSAGE_SET = (
    "collectives are issued while iterating over a set: its order depends on each process's hash "
    "seed, so ranks can issue them in different orders; iterate over sorted(...) instead"
)


class Variant(Enum):
    """The shapes of this rule's findings, for the fixers (collcheck.adopt.fixers) to match on."""

    GUARD = "guard"  # MESSAGE: a guarded collective (or exit with nothing after it)
    EXIT = "exit"  # MESSAGE_EXIT: a guarded exit that skips collectives
    SET = "set"  # MESSAGE_SET: a communicating loop over a set (describe_region)


def variant(finding: Finding) -> Variant | None:
    """Which of this rule's shapes `finding` is, from the arguments `describe` or
    `describe_region` gave it (a loop over a set has none)."""
    args = dict(finding.message_args)
    if not args:
        return Variant.SET
    if "exit" in args:
        return Variant.EXIT
    return Variant.GUARD if "element" in args else None


def guard(d: Divergence) -> Reason | None:
    """The condition that splits the ranks and reads the per-process value, when one is known."""
    found = _guard_reads(d)
    if found is not None:
        return found[0]
    return next((reason for reason in d.why if reason.kind is ConditionKind.EXCEPTION), None)


def _guard_reads(d: Divergence) -> tuple[Reason, ReadsByRank] | None:
    """The first splitting condition that reads the per-process value on some rank, and what it
    reads on each."""
    for reason, reads in zip(d.why, d.process_reads, strict=True):
        if any(_per_process(read, d.nondet_why) for on_rank in reads for read in on_rank):
            return reason, reads
    return None


def _per_process(read: ProcessRead, why: str) -> bool:
    return bool(why) and read.why == why


def cause(d: Divergence) -> Location | None:
    """The guard that reads the value: a suppression there covers the finding."""
    reason = guard(d)
    return None if reason is None else Location(reason.path, reason.line, reason.column)


def shown_at(d: Divergence) -> Location | None:
    """Where the finding is shown: the guard that reads the value (`cause`); for an exception,
    whose `except` line is not where a reader looks nor what a fix changes, the collective it
    decides on (`_parted`), the message naming the `except` line."""
    element = _parted(d)
    return element_location(element) if element is not None else cause(d)


def _parted(d: Divergence) -> Element | None:
    """For a divergence an exception explains (no guard reads a per-process value): the first
    collective where the two ranks' calls part, by where they are called (the one the exception
    skips, or runs on the failed rank alone; `barrier()` in the `try` after the call that
    raised, not the one after it that both ranks reach and the sequences pair with it)."""
    if _guard_reads(d) is not None or guard(d) is None:
        return None
    for pair in zip_longest(d.sequence_a, d.sequence_b):
        present = [element for element in pair if element is not None]
        places = {(element_location(e).path, element_location(e).line) for e in present}
        if len(present) == 1 or len(places) > 1:
            return min(present, key=lambda element: element_location(element).line)
    return None


def what_varies(d: Divergence) -> str:
    """What varies, and where the guard reads it: "wall-clock time (`time.time()` read at x.py:14)"."""
    what = d.nondet_why or "a per-process value"
    reason = guard(d)
    if reason is None:
        return what
    found = _guard_reads(d)
    on_first_rank = found[1][0] if found is not None and found[1] else ()
    calls = [_call_text(read) for read in on_first_rank if _per_process(read, d.nondet_why)]
    verb = "caught" if reason.kind is ConditionKind.EXCEPTION else "tested"
    read = f"{', '.join(calls)}, {verb}" if calls else verb
    assumption = SHARED_FILESYSTEM_NOTE if d.per_process is PerProcess.FILESYSTEM else ""
    return f"{what} ({read} at {Path(reason.path).name}:{reason.line}{assumption})"


def _call_text(read: ProcessRead) -> str:
    """ "`time.time()` at line 8", or "`time.time()`" when the line is unknown."""
    return f"`{read.call}` at line {read.line}" if read.line is not None else f"`{read.call}`"


def applies(d: Divergence) -> bool:
    if not d.nondet_only or d.per_process is PerProcess.OWN_DATA:  # CC008's
        return False
    return not (d.per_process is PerProcess.EXCEPTION and d.exit is not None)


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, at_high = ranks(d)
    element = _parted(d) or (at_low if at_low is not None else at_high)
    if d.exit is not None and element is not None:
        # One finding per guarded exit, not one per collective it skips.
        return MESSAGE_EXIT, {
            "exit": d.exit.kind.value,
            "where": f"{Path(d.exit.path).name}:{d.exit.line}",
            "what": what_varies(d),
            "rank_x": str(low),
            "rank_y": str(high),
            "element": describe_element(element),
        }
    text = f"`{d.exit.kind.value}`" if element is None and d.exit is not None else describe_element(element)
    return MESSAGE, {
        "what": what_varies(d),
        "element": text,
        "rank_x": str(low),
        "rank_y": str(high),
    }


def describe_region(region: Region, found: list[Divergence]) -> tuple[str, dict[str, str]] | None:
    """A communicating loop over a set: reported once per loop, without a counterexample. Not when
    the solver found the ranks of one iteration parting on the rank (`found`): that branch is the
    cause, reported by CC001/CC003, and sorting the set would not fix it."""
    if region.kind is not RegionKind.LOOP or not region.over_set:
        return None
    if any(not divergence.nondet_only for divergence in found):
        return None
    return MESSAGE_SET, {}


# Before/after pairs for collcheck.adopt.fixers (tests/test_fixes.py applies each fix to the first text and
# expects exactly the second). Set iteration: safe; a per-process guard: unsafe.
FIX_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "import torch.distributed as dist\n\n\ndef sync(grads, names):\n"
        "    for name in set(names):  # shared\n        dist.all_reduce(grads[name])\n",
        "import torch.distributed as dist\n\n\ndef sync(grads, names):\n"
        "    for name in sorted(set(names)):  # shared\n        dist.all_reduce(grads[name])\n",
    ),
    (
        "import os\n\nimport torch.distributed as dist\n\n\ndef resume(path):\n"
        "    # resume when a checkpoint is there\n    if os.path.exists(path):\n"
        "        load(path)\n        dist.barrier()\n",
        "import os\n\nimport torch.distributed as dist\n\n\ndef resume(path):\n"
        "    # resume when a checkpoint is there\n    decision = [os.path.exists(path)]\n"
        "    dist.broadcast_object_list(decision, src=0)\n    if decision[0]:\n"
        "        load(path)\n        dist.barrier()\n",
    ),
)
