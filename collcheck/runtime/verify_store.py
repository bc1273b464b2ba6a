"""The store client of cross-rank verification: connections to the job's own c10d store under the
`collcheck/attempt<n>/` prefix (verify_protocol.key_prefix: one per torchrun restart), and how
often a rank may talk to it for a world of a given size. In: an address or the job's default
store; a world size. Out: store clients (held in a rank's Connections), Pacing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from collcheck.runtime.relay import STORE_REQUESTS_PER_S
from collcheck.runtime.verify_protocol import key_prefix

TICK_S = 0.05
POSITION_EVERY_S = 0.25
HEARTBEAT_S = 5.0  # an unchanged position is republished this often (a live rank's heartbeat)
# What all ranks' background work may ask of one store per second, together (STORE_REQUESTS_PER_S,
# see relay.py): the comparison tick and the position refresh lengthen with the world to stay
# within it (see `pacing`).
POSITION_REQUESTS_PER_S = 5_000
CONNECT_BUDGET_S = 10.0  # retrying the extra store connections for at least this long,
CONNECT_PER_RANK_S = 0.02  # plus this per rank of the world (a thousand clients connect at once)


@dataclass
class Connections:
    """One rank's clients of the job's store, shared by the parts of its monitor. `store` serves the
    background thread; `sync` the issuing threads (strict mode, async mode's first-seen checks), so
    a wait there never delays the background thread's abort polling; `abort` the abort waiter,
    blocked in its wait. `store` and `sync` are None once the rank degraded to recording only."""

    store: Any = None
    sync: Any = None
    abort: Any = None
    degraded: bool = False  # store failures made this rank recording only: it publishes nothing
    ended: bool = False  # the process group is being destroyed: store errors are expected
    # says `degraded/<rank>` when no connection of ours works: the job's own client
    fallback: Any = field(default=None, repr=False)


def connect_store(address: str | None, timeout_s: float) -> Any:
    """A fresh client on the job's store (or on `address`), under the collcheck prefix.

    Its own connection, so our polling never queues behind (or blocks) the job's store calls.
    """
    import torch.distributed
    from torch.distributed import distributed_c10d

    c10d: Any = torch.distributed  # TCPStore/PrefixStore are re-exported without type stubs
    timeout = timedelta(seconds=timeout_s)
    client: Any
    if address:
        host, _, port = address.rpartition(":")
        client = c10d.TCPStore(host, int(port), is_master=False, timeout=timeout, wait_for_workers=False)
    else:
        base: Any = distributed_c10d._get_default_store()
        while hasattr(base, "underlying_store"):
            base = base.underlying_store
        if isinstance(base, c10d.TCPStore):
            client = c10d.TCPStore(
                base.host, base.port, is_master=False, timeout=timeout, wait_for_workers=False
            )
        else:  # FileStore / HashStore: sharing is safe because we only use non-blocking calls
            client = base
        client.set_timeout(timeout)
    return c10d.PrefixStore(key_prefix(os.environ), client)


def blocking_ok(store: Any) -> bool:
    """Whether a blocking wait on `store` is one request on a connection of our own: a TCPStore
    client under our prefix (or a test's stand-in). A FileStore or HashStore is the job's own
    client (see `connect_store`), and a FileStore's wait re-reads the file every 10 ms: those
    keep polling."""
    inner = getattr(store, "underlying_store", None)
    return inner is None or type(inner).__name__ == "TCPStore"


def job_store() -> Any:
    """The job's own store client (the default group's), under the collcheck prefix: no new
    connection, for the one message a rank whose own connections failed still owes the others.
    Unwrapped to the base store, as `connect_store` does: the default store is a PrefixStore of
    the default group, under which our keys would be invisible to the other ranks' clients."""
    import torch.distributed
    from torch.distributed import distributed_c10d

    c10d: Any = torch.distributed
    base: Any = distributed_c10d._get_default_store()
    while hasattr(base, "underlying_store"):
        base = base.underlying_store
    return c10d.PrefixStore(key_prefix(os.environ), base)


@dataclass(frozen=True)
class Pacing:
    """How often a rank's background work talks to the store, for a world of a given size."""

    compare_s: float  # async mode: publish and compare this often
    position_s: float  # a changed position is published at most this often
    heartbeat_s: float  # an unchanged one this often


def pacing(world_size: int) -> Pacing:
    """Every 50 ms up to 1,000 ranks; beyond, as often as keeps the whole world's background
    requests to one store within STORE_REQUESTS_PER_S (one request per rank and tick) and its
    positions within POSITION_REQUESTS_PER_S: at 10,000 ranks a tick every 0.5 s and a position
    at most every 2 s. Abort and strict verdicts do not wait for a tick (blocking waits)."""
    compare = max(TICK_S, world_size / STORE_REQUESTS_PER_S)
    position = max(POSITION_EVERY_S, world_size / POSITION_REQUESTS_PER_S)
    return Pacing(compare, position, max(HEARTBEAT_S, 4 * position))


def relayed_compare_s(requesters: int) -> float:
    """Async mode's tick when followers read through node relays (relay.py): per tick the job
    store sees one read per relay, one write per rank that publishes, and one read per rank
    without a relay (`requesters`), not one per rank: 50 ms up to 1,000 of those."""
    return max(TICK_S, requesters / STORE_REQUESTS_PER_S)


def connect_budget(world_size: int, timeout_s: float) -> float:
    """How long to keep trying to connect: longer for a large world (its ranks all connect at
    once), but at most half the stall timeout, so that followers waiting for a leader that is
    still trying never take it for a stall."""
    return min(CONNECT_BUDGET_S + CONNECT_PER_RANK_S * world_size, max(timeout_s / 2, 1.0))
