"""Cross-rank verification through the job's own c10d store, and the stall watchdog.

Protocol (keys live under the `collcheck/` prefix of the job's store; no new service):

* `fp/<group>/<seq>`: the fingerprint of collective #seq of a group, published by the group's
  leader (its lowest global rank). `head/<group>` counts how many the leader has published.
  Every other member compares its own fingerprint with the leader's, so each pair of ranks is
  compared through the leader with one store key per collective rather than one per rank.
* `pos/<rank>`: where a rank is (per-group issued counts, collectives in flight, its last one),
  refreshed a few times a second; read only when a stall is reported.
* `abort`: the first error report (compare_set, so the first reporter wins); every rank polls it
  and stops, so one rank's finding ends the whole job instead of leaving the others hanging.

Asynchronous mode does all store traffic on a background thread. Strict mode publishes and
compares on the calling thread before the collective is issued. Every store wait has a timeout;
any store failure degrades the tracer to recording only (with a warning), never to a hang.
The functions at the bottom (report texts, cycle search) are pure, so tests can call them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from collcheck.runtime.record import CollectiveEvent, ReportEvent, TraceWriter

ABORT_EXIT_CODE = 86
TICK_S = 0.05
POSITION_EVERY_S = 0.25
FLUSH_S = 2.0
ABORT_GRACE_S = 0.5
ABORT_LINGER_S = 3.0
KEY_WINDOW = 65_536  # fingerprints kept per group behind the newest (about 200 bytes each)
PRUNE_PER_TICK = 1_024  # deletions per tick at most: the checker's tick stays short
PREFIX = "collcheck"


# ---------------------------------------------------------------------------------------------
# Plain data exchanged through the store


def fingerprint(event: CollectiveEvent) -> dict[str, Any]:
    """The compact record one rank publishes for one (group, seq)."""
    return {
        "r": event.rank,
        "g": event.group,
        "n": event.seq,
        "s": event.signature,
        "d": event.describe,
        "site": event.site.short,
        "ranks": list(event.group_ranks),
    }


def blocked_fingerprint(event: CollectiveEvent) -> dict[str, Any]:
    """A fingerprint plus when the collective was issued (what positions and stalls show)."""
    fp = fingerprint(event)
    fp["since"] = event.t_start
    return fp


def mismatch_kind(mine: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """ "mismatch" when the collectives differ, "callsite" when only where they were issued does."""
    if mine["s"] != theirs["s"]:
        return "mismatch"
    if mine["site"] != theirs["site"]:
        return "callsite"
    return None


def side(fp: dict[str, Any]) -> str:
    return f"rank {fp['r']} {fp['d']} at {fp['site']}"


def mismatch_text(first: dict[str, Any], second: dict[str, Any]) -> str:
    """`rank 0 all_reduce(float32[1024]) at train.py:13 vs rank 1 ... (group 0, #1)`."""
    low, high = sorted((first, second), key=lambda fp: int(fp["r"]))
    return f"{side(low)} vs {side(high)} (group {first['g']}, #{first['n']})"


@dataclass
class Position:
    """Where one rank is, as published under `pos/<rank>`."""

    rank: int
    t: float
    issued: dict[str, int] = field(default_factory=dict)
    inflight: list[dict[str, Any]] = field(default_factory=list)  # fingerprints plus "since"
    last: dict[str, Any] | None = None
    last_done: bool = False
    exited: bool = False

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        data = json.loads(text)
        return cls(**data)


def where(position: Position | None, now: float) -> str:
    """One line saying where a rank is."""
    if position is None:
        return "never reported a position (not started, or no collective yet)"
    parts = []
    if position.inflight:
        oldest = position.inflight[0]
        parts.append(
            f"blocked in {oldest['d']} at {oldest['site']} (group {oldest['g']}, #{oldest['n']}) "
            f"for {now - oldest['since']:.1f}s"
        )
    elif position.last is not None:
        state = "completed" if position.last_done else "issued"
        last = position.last
        parts.append(f"last {last['d']} at {last['site']} (group {last['g']}, #{last['n']}), {state}")
    else:
        parts.append("no collective yet")
    if position.exited:
        parts.append("exited")
    elif now - position.t > 5 * POSITION_EVERY_S + 1.0:
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
                other = positions.get(peer)
                issued = other.issued.get(blocked["g"], 0) if other is not None else 0
                if peer != rank and issued < blocked["n"]:
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
    steps = [f"rank {rank} (in group {b['g']} #{b['n']} {b['d']} at {b['site']})" for rank, b in cycle]
    return " waits for ".join(steps) + f", which waits for rank {cycle[0][0]}"


def _behind(position: Position | None, blocked: dict[str, Any]) -> bool:
    """Whether a rank has not issued the collective another rank is blocked in (unknown counts)."""
    return position is None or position.issued.get(blocked["g"], 0) < blocked["n"]


def stall_text(me: int, blocked: dict[str, Any], positions: dict[int, Position | None], now: float) -> str:
    """The stall report: who has not issued the collective, where every rank is, any wait cycle."""
    lines = [
        f"stall: rank {me} has waited {now - blocked['since']:.1f}s in {blocked['d']} at "
        f"{blocked['site']} (group {blocked['g']}, #{blocked['n']})"
    ]
    peers = [peer for peer in blocked.get("ranks", ()) if peer != me]
    missing = [peer for peer in peers if _behind(positions.get(peer), blocked)]
    if missing:
        lines.append(f"  not issued by: {', '.join(f'rank {peer}' for peer in missing)}")
    for rank in sorted(positions):
        lines.append(f"  rank {rank}: {where(positions[rank], now)}")
    cycle = find_wait_cycle(positions)
    if cycle:
        lines.append(f"  wait cycle: {cycle_text(cycle)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Store access


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
    return c10d.PrefixStore(PREFIX, client)


# ---------------------------------------------------------------------------------------------
# The monitor: background thread for async checks, positions, abort polling and stalls


@dataclass
class MonitorConfig:
    rank: int
    verify: bool
    strict: bool
    timeout_s: float
    world_size: int = 1
    abort: bool = True


class Monitor:
    """Owns all cross-rank traffic of one rank. Errors end the job (when configured to abort);
    store failures degrade to recording only."""

    def __init__(
        self,
        config: MonitorConfig,
        writer: TraceWriter,
        store_factory: Callable[[], Any] | None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.writer = writer
        self._factory = store_factory
        self._on_tick = on_tick  # record mode: notes completions before stalls are checked
        self.store: Any = None
        self.strict_store: Any = None
        self._lock = threading.Lock()
        self._new: deque[CollectiveEvent] = deque()
        self._pending: dict[str, deque[dict[str, Any]]] = {}
        # Events, not fingerprints: building those (strings, relative paths) is left to the
        # background thread, off the collective's path.
        self._inflight: dict[tuple[str, int], CollectiveEvent] = {}
        self._issued: dict[str, int] = {}
        self._last: CollectiveEvent | None = None
        self._last_done = False
        self._stalled: set[tuple[str, int]] = set()
        self._callsite_warnings = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._position_sent = 0.0
        self._position_dirty = True
        self._degraded = False
        self.ended = False  # the process group is being destroyed: store errors are expected
        self._published: dict[str, int] = {}  # group -> last fingerprint this rank (the leader) set
        self._pruned: dict[str, int] = {}  # group -> fingerprints deleted up to this sequence number

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._factory is not None:
            try:
                self.store = self._factory()
                if self.config.strict:
                    self.strict_store = self._factory()
            except Exception as error:
                self._degrade(f"store unreachable ({_short(error)})", loud=True)
        self._thread = threading.Thread(target=self._run, name="collcheck-monitor", daemon=True)
        self._thread.start()

    def stop(self, exited: bool = True) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        if self.store is None:
            return
        try:
            self._flush()
            if exited:
                self._publish_position(exited=True)
        except Exception:  # the store may already be gone at exit; the trace has everything
            pass

    def _flush(self, wait_s: float = FLUSH_S) -> None:
        """Compare what is still pending, so a short job's last collectives are checked too."""
        if not self.config.verify or self.config.strict:
            return
        deadline = time.time() + wait_s
        while True:
            self._publish_and_compare(self.store)
            if not any(self._pending.values()) or time.time() > deadline:
                return
            time.sleep(TICK_S)

    # -- called by the tracer on the issuing thread --------------------------------------------

    def issued(self, event: CollectiveEvent) -> None:
        with self._lock:
            self._issued[event.group] = event.seq
            self._inflight[(event.group, event.seq)] = event
            self._last, self._last_done = event, False
            self._position_dirty = True
            if self.config.verify and not self.config.strict:
                self._new.append(event)
        if self.config.verify and self.config.strict and self.strict_store is not None:
            self._agree(event, blocked_fingerprint(event))

    def completed(self, group: str, seq: int) -> None:
        with self._lock:
            inflight = self._inflight
            inflight.pop((group, seq), None)
            # A group runs its collectives in order: a later one done means earlier ones are too
            # (covers works whose completion cannot be observed). Usually nothing is left in flight.
            if inflight:
                for key in [key for key in inflight if key[0] == group and key[1] < seq]:
                    del inflight[key]
            if self._last is not None and self._last.group == group and self._last.seq == seq:
                self._last_done = True
            self._position_dirty = True

    def replace_state(
        self,
        issued: dict[str, int],
        inflight: list[CollectiveEvent],
        last: CollectiveEvent | None,
        last_done: bool,
    ) -> None:
        """Record mode with the native recorder: what it has issued and has in flight, read back
        on each tick (instead of `issued`/`completed` calls per collective)."""
        with self._lock:
            changed = issued != self._issued or last is not self._last or last_done != self._last_done
            self._issued = issued
            self._inflight = {(event.group, event.seq): event for event in inflight}
            self._last, self._last_done = last, last_done
            if changed:
                self._position_dirty = True

    def collective_failed(self) -> None:
        """A collective failed in the backend: if another rank reported why, stop with that."""
        store = self.store
        if store is None:
            return
        deadline = time.time() + ABORT_GRACE_S
        try:
            while time.time() < deadline:  # the reporter sets the key just before it exits
                self._check_abort(store)
                time.sleep(TICK_S / 5)
        except Exception:
            pass

    # -- strict mode ---------------------------------------------------------------------------

    def _agree(self, event: CollectiveEvent, fp: dict[str, Any]) -> None:
        """Publish (leader) or wait for the leader's fingerprint and compare, before issuing."""
        store = self.strict_store
        leader = min(event.group_ranks)
        key = f"fp/{event.group}/{event.seq}"
        try:
            if event.rank == leader:
                store.set(key, json.dumps(fp))
                self._published[event.group] = event.seq
                return
            theirs = self._wait_for(store, key, event, fp)
        except Exception as error:
            self._degrade(f"strict check failed ({_short(error)})", loud=True)
            return
        if theirs is not None:
            self._compare(fp, theirs, strict=True)

    def _wait_for(
        self, store: Any, key: str, event: CollectiveEvent, fp: dict[str, Any]
    ) -> dict[str, Any] | None:
        deadline = time.time() + self.config.timeout_s
        while True:
            try:
                store.wait([key], timedelta(seconds=0.5))
                return dict(json.loads(store.get(key)))
            except Exception as error:
                if "timeout" not in str(error).lower() and "wait" not in str(error).lower():
                    raise
            self._check_abort(store)
            if time.time() > deadline:
                self._report_stall(fp, store)
                return None

    # -- background thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self._tick()
            except Exception as error:  # the checker itself failed: keep recording
                if self.ended:
                    return
                self._degrade(f"checker failed ({_short(error)})", loud=True)

    def _tick(self) -> None:
        if self._on_tick is not None:
            self._on_tick()
        store = self.store
        if store is not None:
            self._check_abort(store)
            if self.config.verify and not self.config.strict:
                self._publish_and_compare(store)
            self._maybe_publish_position()
            self._prune(store)
        self._check_stalls()

    def _check_abort(self, store: Any) -> None:
        if not store.check(["abort"]):
            return
        text = store.get("abort").decode("utf-8", "replace")
        first = text.splitlines()[0] if text else "an error"
        try:  # tell the reporter we saw it: it may host the store and waits before exiting
            store.add("abort_ack", 1)
            time.sleep(3 * TICK_S)  # and give it time to read the ack before our store goes away
        except Exception:
            pass
        self._finish("aborted", f"stopping: {first}", echo=True)

    def _publish_and_compare(self, store: Any) -> None:
        with self._lock:
            new = list(self._new)
            self._new.clear()
        mine: list[tuple[str, str]] = []
        counts: dict[str, int] = {}
        for event in new:
            fp = fingerprint(event)
            if event.rank == min(event.group_ranks):
                mine.append((f"fp/{event.group}/{event.seq}", json.dumps(fp)))
                counts[event.group] = counts.get(event.group, 0) + 1
            else:
                self._pending.setdefault(event.group, deque()).append(fp)
        if mine:
            # Fingerprints first, then the head: a reader never sees a head ahead of its keys.
            store.multi_set([key for key, _ in mine], [value for _, value in mine])
            for group, count in counts.items():
                store.add(f"head/{group}", count)
            for event in new:
                if event.rank == min(event.group_ranks):
                    self._published[event.group] = max(self._published.get(event.group, 0), event.seq)
        for group, pending in self._pending.items():
            self._compare_group(store, group, pending)

    def _prune(self, store: Any) -> None:
        """Delete fingerprints far behind the newest: a long job must not grow the store without
        bound. Followers compare within a tick or two; KEY_WINDOW leaves them ample slack."""
        for group, newest in list(self._published.items()):
            start = self._pruned.get(group, 0) + 1
            stop = min(newest - KEY_WINDOW, start + PRUNE_PER_TICK - 1)
            for seq in range(start, stop + 1):
                store.delete_key(f"fp/{group}/{seq}")
            if stop >= start:
                self._pruned[group] = stop

    def _compare_group(self, store: Any, group: str, pending: deque[dict[str, Any]]) -> None:
        if not pending:
            return
        head = int(store.add(f"head/{group}", 0))
        ready = []
        while pending and pending[0]["n"] <= head:
            ready.append(pending.popleft())
        if not ready:
            return
        values = store.multi_get([f"fp/{group}/{fp['n']}" for fp in ready])
        for fp, raw in zip(ready, values, strict=False):
            self._compare(fp, dict(json.loads(raw)), strict=False)

    def _compare(self, mine: dict[str, Any], theirs: dict[str, Any], strict: bool) -> None:
        kind = mismatch_kind(mine, theirs)
        if kind is None:
            return
        text = mismatch_text(theirs, mine)
        if kind == "mismatch":
            self._fail("mismatch", f"collective mismatch: {text}")
        elif strict:
            self._fail("callsite", f"call-site divergence (strict): {text}")
        else:
            self._warn_callsite(text)

    def _warn_callsite(self, text: str) -> None:
        self._callsite_warnings += 1
        if self._callsite_warnings <= 3:
            self._report(
                "callsite",
                "warning",
                f"call-site divergence: {text} (same collective "
                "issued from different lines; legitimate for the barrier trick, wrong for a "
                "swapped pair)",
                echo=True,
            )

    # -- positions and stalls ------------------------------------------------------------------

    def _position(self, exited: bool = False) -> Position:
        with self._lock:
            events = sorted(self._inflight.values(), key=lambda event: event.t_start)
            issued, last, last_done = dict(self._issued), self._last, self._last_done
        return Position(
            rank=self.config.rank,
            t=time.time(),
            issued=issued,
            inflight=[blocked_fingerprint(event) for event in events],
            last=fingerprint(last) if last is not None else None,
            last_done=last_done,
            exited=exited,
        )

    def _publish_position(self, exited: bool = False) -> None:
        self.store.set(f"pos/{self.config.rank}", self._position(exited).to_json())
        self._position_sent = time.time()
        self._position_dirty = False

    def _maybe_publish_position(self) -> None:
        age = time.time() - self._position_sent
        if (self._position_dirty and age > POSITION_EVERY_S) or age > 1.0:
            self._publish_position()

    def _check_stalls(self) -> None:
        now = time.time()
        with self._lock:
            overdue = [
                event
                for key, event in self._inflight.items()
                if now - event.t_start > self.config.timeout_s and key not in self._stalled
            ]
        if overdue:
            oldest = min(overdue, key=lambda event: event.t_start)
            self._stalled.add((oldest.group, oldest.seq))
            self._report_stall(blocked_fingerprint(oldest), self.store)

    def _report_stall(self, blocked: dict[str, Any], store: Any) -> None:
        now = time.time()
        positions: dict[int, Position | None] = {self.config.rank: self._position()}
        if store is not None:
            try:
                positions.update(self._read_positions(store, blocked))
                positions[self.config.rank] = self._position()
            except Exception as error:
                positions = {self.config.rank: self._position()}
                self._degrade(f"could not read positions ({_short(error)})", loud=False)
        text = stall_text(self.config.rank, blocked, positions, now)
        if store is None:
            # Recording only: without the other ranks' positions a slow peer and a hang look the
            # same, so report and let the job's own timeout decide rather than kill it.
            text += "\n  (other ranks unknown: no store; see `collcheck trace` on the trace directory)"
            self._report("stall", "warning", text, echo=True)
            return
        self._fail("stall", text)

    def _read_positions(self, store: Any, blocked: dict[str, Any]) -> dict[int, Position | None]:
        # Every rank we know of: the blocked group's members plus the groups we are in.
        ranks = set(blocked.get("ranks", ()))
        with self._lock:
            for event in self._inflight.values():
                ranks.update(event.group_ranks)
        found = {rank: _read_position(store, rank) for rank in sorted(ranks)}
        # Ranks named by another rank's blocked collective (in another group) are needed for cycles.
        named = {
            peer
            for position in found.values()
            if position is not None
            for blocked in position.inflight
            for peer in blocked.get("ranks", ())
        }
        for rank in sorted(named - set(found)):
            found[rank] = _read_position(store, rank)
        return found

    # -- reporting -----------------------------------------------------------------------------

    def _report(self, kind: str, severity: str, text: str, echo: bool) -> None:
        self.writer.write(ReportEvent(kind, severity, text, time.time(), self.config.rank).to_json())
        if echo:
            _echo(f"collcheck: rank {self.config.rank}: {text}")

    def _fail(self, kind: str, text: str) -> None:
        self._report(kind, "error", text, echo=True)
        if not self.config.abort:
            return
        if self.store is not None or self.strict_store is not None:
            store = (
                self.strict_store
                if threading.current_thread() is threading.main_thread() and self.strict_store is not None
                else self.store
            )
            try:
                store.compare_set("abort", "", f"rank {self.config.rank}: {text}")
                self._linger(store)
            except Exception:
                pass
        self._finish(None, None, echo=False)

    def _linger(self, store: Any) -> None:
        """Stay up until the other ranks have seen the abort: this rank may be hosting the store."""
        deadline = time.time() + ABORT_LINGER_S
        while time.time() < deadline and int(store.add("abort_ack", 0)) < self.config.world_size - 1:
            time.sleep(TICK_S)

    def _finish(self, kind: str | None, text: str | None, echo: bool) -> None:
        """End this process: a finding was made here or on another rank."""
        if kind is not None and text is not None:
            self._report(kind, "error", text, echo=echo)
        self.writer.close()
        sys.stderr.flush()
        os._exit(ABORT_EXIT_CODE)

    def _degrade(self, why: str, loud: bool) -> None:
        if self._degraded:
            return
        self._degraded = True
        self.store = None
        self.strict_store = None
        quiet = self.ended or not loud
        self._report("degraded", "warning", f"{why}; recording only", echo=not quiet)


def _read_position(store: Any, rank: int) -> Position | None:
    key = f"pos/{rank}"
    return Position.from_json(store.get(key)) if store.check([key]) else None  # never a blocking get


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def _echo(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:
        pass
