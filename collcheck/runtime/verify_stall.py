"""The stall detector's reasoning: where each rank is (its Position), who has not issued what
another rank is blocked in, wait cycles between ranks, the stall report's text, and positions
brought up to date from the tails of other ranks' traces (`caught_up`, the one that reads files).
The monitor (verify.py) reads the positions from the store and decides when one is overdue.
"""

from __future__ import annotations

import json
import os
from typing import Any

from collcheck.runtime.p2p import is_p2p
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.trace_binary import is_binary_trace
from collcheck.runtime.trace_live import tail_rows
from collcheck.runtime.verify_protocol import Position, fingerprint, label


def where(position: Position | None, now: float) -> str:
    """One line saying where a rank is."""
    if position is None:
        return "never reported a position (not started, or no collective yet)"
    parts = []
    if position.inflight:
        oldest = position.inflight[0]
        parts.append(
            f"blocked in {oldest['d']} at {oldest['site']} ({label(oldest)}) for {now - oldest['since']:.1f}s"
        )
    elif position.last is not None:
        state = "completed" if position.last_done else "issued"
        last = position.last
        parts.append(f"last {last['d']} at {last['site']} ({label(last)}), {state}")
    else:
        parts.append("no collective yet")
    if position.exited:
        parts.append("exited")
    elif now - position.t > 2 * position.hb + 1.0:
        parts.append(f"silent for {now - position.t:.1f}s (dead or stopped?)")
    return "; ".join(parts)


def waits_for(positions: dict[int, Position | None]) -> dict[int, list[tuple[int, dict[str, Any]]]]:
    """Edges rank -> (rank it waits for, the collective it is blocked in)."""
    edges: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for rank, position in positions.items():
        if position is None:
            continue
        for blocked in position.inflight:
            for peer in blocked.get("ranks", ()):
                if peer != rank and _behind(positions.get(peer), blocked):
                    edges.setdefault(rank, []).append((peer, blocked))
    return edges


def find_wait_cycle(positions: dict[int, Position | None]) -> list[tuple[int, dict[str, Any]]]:
    """A cycle of ranks each blocked waiting for the next, as (rank, collective it is blocked in)."""
    edges = waits_for(positions)
    for start in sorted(edges):
        path: list[tuple[int, dict[str, Any]]] = []
        seen: set[int] = set()
        rank = start
        while rank in edges and rank not in seen:
            seen.add(rank)
            peer, blocked = edges[rank][0]
            path.append((rank, blocked))
            if peer == start:
                return path
            rank = peer
    return []


def cycle_text(cycle: list[tuple[int, dict[str, Any]]]) -> str:
    steps = [f"rank {rank} (in {label(b).replace(',', '')} {b['d']} at {b['site']})" for rank, b in cycle]
    return " waits for ".join(steps) + f", which waits for rank {cycle[0][0]}"


def _counter(blocked: dict[str, Any]) -> tuple[str, int] | None:
    """The position counter that tells whether a peer has issued its side of `blocked`: the group's
    for a collective, the channel's for a send or recv; None for a recv from any source."""
    if "c" in blocked:
        return str(blocked["c"]), int(blocked["k"])
    if is_p2p(str(blocked["g"])):
        return None
    return str(blocked["g"]), int(blocked["n"])


def _behind(position: Position | None, blocked: dict[str, Any]) -> bool:
    """Whether a rank has not issued its side of what another rank is blocked in (unknown counts)."""
    counter = _counter(blocked)
    if counter is None:
        return False
    return position is None or position.issued.get(counter[0], 0) < counter[1]


def peer_finished(me: int, blocked: dict[str, Any], positions: dict[int, Position | None]) -> bool:
    """Whether the peer of a send or recv `me` is "blocked" in has issued and completed its side:
    the transfer happened, and `me` only never waited for its Work (gloo's send/recv Works complete
    in `wait()`, so one never waited for would otherwise look stalled)."""
    if "c" not in blocked:
        return False
    for peer in blocked.get("ranks", ()):
        position = positions.get(peer)
        if peer == me or position is None:
            continue
        if _behind(position, blocked):
            return False
        return not any(b.get("c") == blocked["c"] and b.get("k") == blocked["k"] for b in position.inflight)
    return False


def _not_issued(blocked: dict[str, Any]) -> str:
    op = blocked.get("o")
    return {"send": "matching recv not issued by", "recv": "matching send not issued by"}.get(
        str(op), "not issued by"
    )


def stall_text(me: int, blocked: dict[str, Any], positions: dict[int, Position | None], now: float) -> str:
    """The stall report: who has not issued the collective, where every rank is, any wait cycle."""
    lines = [
        f"stall: rank {me} has waited {now - blocked['since']:.1f}s in {blocked['d']} at "
        f"{blocked['site']} ({label(blocked)})"
    ]
    peers = [peer for peer in blocked.get("ranks", ()) if peer != me]
    missing = [peer for peer in peers if _behind(positions.get(peer), blocked)]
    if missing:
        lines.append(f"  {_not_issued(blocked)}: {', '.join(f'rank {peer}' for peer in missing)}")
    for rank in sorted(positions):
        lines.append(f"  rank {rank}: {where(positions[rank], now)}")
    cycle = find_wait_cycle(positions)
    if cycle:
        lines.append(f"  wait cycle: {cycle_text(cycle)}")
    return "\n".join(lines)


PEER_INT_LIMIT = 1 << 62  # a rank or number beyond this in another rank's trace is damage, not a count
TRACE_TAIL = 1 << 18  # bytes of another rank's trace read to bring its position up to date
# The same for a binary trace (about as many collectives as TRACE_TAIL holds of JSON lines).
BINARY_TRACE_TAIL = TRACE_TAIL // 8


def caught_up(rank: int, position: Position | None, path: str) -> Position | None:
    """`position` updated from the end of the rank's trace when the trace is further along: its
    counters, its last collective (completed if its `done` line is there), and in flight only what
    the trace does not show completed. Unchanged when the trace is unreadable or not newer."""
    rows = _tail_rows(path)
    events = [event for event in map(_event_or_none, rows) if event is not None]
    if not events:
        return position
    done = {key for key in map(_done_or_none, rows) if key is not None}
    base = position if position is not None else Position(rank, events[-1].t_start)
    issued = dict(base.issued)
    for event in events:
        issued[event.group] = max(issued.get(event.group, 0), event.seq)
    if issued == base.issued and position is not None:
        return position
    latest: dict[str, int] = {}  # per group, the newest completed: a group completes in order
    for group, seq in done:
        latest[group] = max(latest.get(group, 0), seq)
    inflight = [blocked for blocked in base.inflight if _still_open(blocked, latest, done)]
    last = events[-1]
    return Position(
        rank=rank,
        t=base.t,
        issued=issued,
        inflight=inflight,
        last=fingerprint(last),
        last_done=(last.group, last.seq) in done,
        exited=base.exited or any(row.get("ev") == "exit" for row in rows),
    )


def _event_or_none(row: dict[str, Any]) -> CollectiveEvent | None:
    """A `coll` line of another rank's trace, or None for any other line or a malformed one."""
    if row.get("ev") != "coll":
        return None
    try:
        event = CollectiveEvent.from_json(row)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return event if 0 <= event.seq < PEER_INT_LIMIT and 0 <= event.rank < PEER_INT_LIMIT else None


def _done_or_none(row: dict[str, Any]) -> tuple[str, int] | None:
    """(group, seq) of a `done` line of another rank's trace, or None."""
    if row.get("ev") != "done":
        return None
    try:
        seq = int(row.get("seq", 0))
    except (TypeError, ValueError, OverflowError):
        return None
    return (str(row.get("group")), seq) if 0 <= seq < PEER_INT_LIMIT else None


def _still_open(blocked: dict[str, Any], latest: dict[str, int], done: set[tuple[str, int]]) -> bool:
    group, seq = str(blocked["g"]), int(blocked["n"])
    if is_p2p(group):  # sends and recvs with different peers complete in any order
        return (group, seq) not in done
    return latest.get(group, 0) < seq


def _tail_rows(path: str) -> list[dict[str, Any]]:
    """The complete JSON lines among the last TRACE_TAIL bytes of a trace (or the records of a
    binary one, trace_live.tail_rows); [] if unreadable."""
    if is_binary_trace(os.path.basename(path)):
        return tail_rows(path, BINARY_TRACE_TAIL)
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - TRACE_TAIL))
            chunk = handle.read(TRACE_TAIL)
    except OSError:
        return []
    rows = []
    for line in chunk.split(b"\n"):
        try:
            row = json.loads(line)
        except ValueError:  # the torn first and last lines of the window
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
