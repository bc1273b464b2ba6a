"""## What it does
Finds blocking point-to-point calls (`send`/`recv`, `send_object_list`/`recv_object_list`) whose
order deadlocks: two ranks that each block sending to (or receiving from) the other first, a cycle
of waits through three or more ranks, a wait that opens after some calls matched (a 1F1B schedule
whose adjacent stages both send first), or a rank that sends more messages than its peer receives.
Posted transfers count too: a send or receive of a `batch_isend_irecv` list (or an `isend`/`irecv`
waited on later) that the peer's batch or calls never answer is a wait that never returns; the
order of a batch's list decides nothing.

Beyond the first calls of two ranks, collcheck runs the blocking calls of every rank of worlds of 2
to 6 ranks (or the `--world-size` given) against each other: a send returns when its peer posts the
matching receive. That finds the cycle where rank 0 sends to the last rank while the last rank
waits for rank 1, which waits for rank 0; the steady phase of a 1F1B pipeline whose sends and
receives are issued by helpers inside `is_first_stage`/`is_last_stage` branches and warmup, steady
and cooldown loops; and a sender and a receiver that filter one list with different predicates
(`[t for t in items if t.requires_grad]` against `[t for t in items if t is not None]`).

Each rank's branches and loop counts must follow from the rank and the world size (values the same
on every rank, such as the number of microbatches, get one value per world, shown as `assumed` in
the counterexample; the lengths of one list filtered by two different predicates get two different
values; a `for i in range(n)` loop is run iteration by iteration when its body tests `i`). A
counterexample lists each waiting rank's blocking calls up to the one it waits in. Each `P2POp` of
a batch counts where it is made (a list built by appends in a loop, by a comprehension, per branch
or by a helper of the run), with the direction of the op handed to it; a posted transfer with no
partner is reported when the peer answers it elsewhere in the function, or when the function ran
clean in another world (it is an exchange of its own, not one half of one:
`send_forward_recv_backward` alone is quiet). A function whose ranks take paths chosen by other
data, whose peers come from tables or unknown code, whose loops live in helpers of other files, or
whose file (or a file of its helpers) names a non-blocking call that the run did not record is not
simulated; there only the first-call check applies. A function whose ranks all run to their end in
every world simulated is not reported by the first-call check either, which compares loop
iterations as if every rank ran the same one.

## Why is this bad?
A blocking `send` may not return until the peer posts the matching `recv`. When both peers send
first, both wait forever (with large messages on NCCL and gloo), and the hang appears only at
scale or with bigger tensors. A receive whose send never comes waits forever at any size.

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
Sender and receiver of a list of tensors must select the tensors with the same predicate.

## References
- PyTorch, `torch.distributed.batch_isend_irecv`
- Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (the 1F1B pipeline schedule)
"""

from __future__ import annotations

from pathlib import PurePath

from collcheck.checks._describe import where
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Blocked, Divergence, DivergenceKind
from collcheck.static.program import CommEvent, EventKind, answering, direction

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
MESSAGE_CYCLE = "ranks {ranks} wait on each other in a cycle of blocking calls: {cycle} (world size {world})"
MESSAGE_UNMATCHED = (
    "rank {rank_x} {verb_x} {count_x} {towards_x} rank {rank_y} ({where_x}) but rank {rank_y} "
    "{verb_y} only {count_y} {towards_y} rank {rank_x} ({where_y}): rank {rank_x} waits forever "
    "(world size {world})"
)


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    if d.blocked:
        return _describe_schedule(d)
    assert d.event_a is not None and d.event_b is not None
    return MESSAGE, {
        "rank_x": str(d.model.rank_a),
        "rank_y": str(d.model.rank_b),
        "op": d.event_a.op,
        "where_x": where(d.event_a),
        "where_y": where(d.event_b),
        "world": str(d.model.world),
    }


def _call(blocked: Blocked) -> str:
    event, peer = blocked.calls[blocked.at]
    verb = f"sends to rank {peer}" if direction(event) is EventKind.P2P_SEND else f"receives from rank {peer}"
    return f"rank {blocked.rank} {verb} ({_site(event)})"


def _site(event: CommEvent) -> str:
    """The call's place, and the call site in the analysed function when a helper issues it."""
    if event.chain and event.chain[0].path and event.chain[0].line != event.line:
        return f"{where(event)}, called at {PurePath(event.chain[0].path).name}:{event.chain[0].line}"
    return where(event)


def _describe_schedule(d: Divergence) -> tuple[str, dict[str, str]]:
    waiting = [b for b in d.blocked if not b.finished]
    finished = [b for b in d.blocked if b.finished]
    if not finished:
        names = [str(b.rank) for b in waiting]
        shown = ", ".join(names[:-1]) + " and " + names[-1]
        cycle = ", ".join(_call(b) for b in waiting)
        return MESSAGE_CYCLE, {"ranks": shown, "cycle": cycle, "world": str(d.model.world)}
    x, y = waiting[0], finished[0]
    kind = direction(x.event)
    sends = kind is EventKind.P2P_SEND
    answer = answering(kind)
    answers = [event for event, peer in y.calls if direction(event) is answer and peer == x.rank]
    return MESSAGE_UNMATCHED, {
        "rank_x": str(x.rank),
        "rank_y": str(y.rank),
        "verb_x": "sends" if sends else "receives",
        "verb_y": "receives" if sends else "sends",
        "towards_x": "to" if sends else "from",
        "towards_y": "from" if sends else "to",
        "count_x": _times(sum(1 for event, peer in x.calls if direction(event) is kind and peer == y.rank)),
        "count_y": _times(len(answers)),
        "where_x": _site(x.event),
        "where_y": _site(answers[-1]) if answers else "nowhere",
        "world": str(d.model.world),
    }


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")
