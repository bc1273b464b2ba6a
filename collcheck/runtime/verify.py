"""Cross-rank verification through the job's own c10d store, and the stall watchdog: the Monitor
of one rank, which connects to the store and drives its parts. They are composed, each in its own
module: the Ledger (verify_ledger.py: where this rank is), the Reporter (verify_report.py:
reports and aborts), the StallWatchdog (verify_watchdog.py), the Comparer (verify_compare.py:
publishers' records against this rank's), the Publisher (verify_publish.py: async mode's queue,
publication and comparison) and the Agreement (verify_agree.py: checks before an op is issued).
What is written where is verify_protocol.py's and verify_wire.py's; the store client and its pace
verify_store.py's; the stall reasoning verify_stall.py's.

In: the tracer's issued and completed collectives. Out: report lines in the trace, and the end of
the job (ABORT_EXIT_CODE) on a mismatch or stall when it is configured to abort.

Asynchronous mode does the store traffic on a background thread (every 50 ms, less often in a
world of more than 1,000 ranks: `pacing`), except the first time a
(group, op, call site) is issued on a rank: that collective is agreed on the calling thread before
it is issued, as in strict mode, so a divergence at a new call site (the usual kind) is caught
before the backend sees it. Strict mode publishes and compares on the calling thread before every
collective, send and recv. Every store wait has a timeout;
any store failure degrades the tracer to recording only (with a warning), never to a hang. The
extra store connections are retried for a time that grows with the world; a rank that cannot
make them says so through the job's own store connection, so that nobody waits for it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from collcheck.runtime.record import CollectiveEvent, TraceWriter
from collcheck.runtime.relay import NodeRelay, short_error
from collcheck.runtime.verify_agree import Agreement
from collcheck.runtime.verify_compare import Comparer
from collcheck.runtime.verify_ledger import Ledger
from collcheck.runtime.verify_publish import Publisher
from collcheck.runtime.verify_report import ABORT_EXIT_CODE, ABORT_GRACE_S, MonitorConfig, Reporter
from collcheck.runtime.verify_store import (
    TICK_S,
    Connections,
    blocking_ok,
    connect_budget,
    job_store,
    pacing,
)
from collcheck.runtime.verify_watchdog import StallWatchdog

__all__ = ["ABORT_EXIT_CODE", "Monitor", "MonitorConfig"]

FLUSH_S = 2.0
CONNECT_FIRST_PAUSE_S = 0.1  # the first pause between tries; doubled up to 2 s


class Monitor:
    """Owns all cross-rank traffic of one rank. Errors end the job (when configured to abort);
    store failures degrade to recording only."""

    def __init__(
        self,
        config: MonitorConfig,
        writer: TraceWriter,
        store_factory: Callable[[], Any] | None,
        on_tick: Callable[[], None] | None = None,
        before_exit: Callable[[], None] | None = None,
        fallback_store: Callable[[], Any] | None = job_store,
        relay: NodeRelay | None = None,
    ) -> None:
        self.config = config
        self.writer = writer
        self._factory = store_factory
        self._on_tick = on_tick  # record mode: notes completions before stalls are checked
        self._background = config.verify and not config.strict  # async: the thread compares
        self._strict = config.verify and config.strict
        # fallback: says `degraded/<rank>` when no connection of ours works
        self.links = Connections(fallback=fallback_store)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._compared = 0.0  # when async mode last published and compared
        pace = pacing(config.world_size)
        self.ledger = Ledger(config.rank, pace)
        self.reporter = Reporter(config, writer, self.links, self._stop, before_exit)
        self.watchdog = StallWatchdog(config, self.ledger, self.reporter, self.links, self._degrade)
        self.comparer = Comparer(self.reporter)
        self.publisher = Publisher(
            config.rank, self.comparer, pace, relay if config.verify and not config.strict else None
        )
        self.agreement = Agreement(
            config, self.links, self.ledger, self.publisher, self.watchdog, self._degrade
        )

    # The background thread's and the issuing threads' store clients (tests set them directly).
    @property
    def store(self) -> Any:
        return self.links.store

    @store.setter
    def store(self, store: Any) -> None:
        self.links.store = store

    @property
    def sync_store(self) -> Any:
        return self.links.sync

    @sync_store.setter
    def sync_store(self, store: Any) -> None:
        self.links.sync = store

    @property
    def ended(self) -> bool:
        return self.links.ended

    @ended.setter
    def ended(self, value: bool) -> None:
        self.links.ended = value

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        links, relay = self.links, self.publisher.relay
        if self._factory is not None:
            try:
                links.store = self._connect()
                if self.config.verify:
                    links.sync = self._connect()
            except Exception as error:
                self._degrade(f"store unreachable ({short_error(error)})", True)
            if links.store is not None and relay is not None:
                relay.start(links.store)
                self.publisher.say_relay()
            if links.store is not None and self.config.abort and blocking_ok(links.store):
                with contextlib.suppress(Exception):  # without it, the tick polls for an abort
                    links.abort = self._factory()
        self.reporter.start_waiter()
        self._thread = threading.Thread(target=self._run, name="collcheck-monitor", daemon=True)
        self._thread.start()

    def _connect(self) -> Any:
        """A store client from the factory, retried with growing pauses for `connect_budget`: the
        job's store was just reachable, so a failure is load (many ranks connecting at once, a
        slow machine), not a wrong address."""
        deadline = time.monotonic() + connect_budget(self.config.world_size, self.config.timeout_s)
        pause = CONNECT_FIRST_PAUSE_S
        assert self._factory is not None
        while True:
            try:
                return self._factory()
            except Exception:
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(2 * pause, 2.0)

    def stop(self, exited: bool = True) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self.reporter.stop_waiter()
        store = self.links.store
        if store is not None:
            try:
                self._flush()
                if self.publisher.relay is not None:
                    self.publisher.relay.close(store)
                if exited:
                    self.ledger.publish_position(store, exited=True)
            except Exception:  # the store may already be gone at exit; the trace has everything
                pass
        self.comparer.say_missed()

    def _flush(self, wait_s: float = FLUSH_S) -> None:
        """Compare what is still pending, so a short job's last collectives are checked too."""
        if not self.config.verify:
            return
        deadline = time.time() + wait_s
        self.publisher.flushing = True
        agreement = self.agreement
        while True:
            if self._background:
                self.publisher.publish_and_compare(self.links.store)
            if agreement.has_late():
                agreement.check_late(self.links.store)
            done = not agreement.has_late() and not self.publisher.waiting()
            if done or time.time() > deadline:
                return
            time.sleep(TICK_S)

    # -- called by the tracer on the issuing thread --------------------------------------------

    def issued(self, event: CollectiveEvent, check: bool = True) -> None:
        """`check=False`: watched for stalls, never compared (a group whose members c10d does not
        know: its guessed leader may not be in it, and nobody would publish)."""
        self.ledger.issue(event)
        if not check:
            return
        first = self._background and self.publisher.queue(event)
        if first or self._strict:
            self.agreement.agree(event)
        elif self.links.degraded:  # its followers may be blocked on this one's slot
            self.agreement.skip_degraded(event)

    def queue_issued(self, event: CollectiveEvent, gated: bool) -> bool:
        """Async mode with the native kernel: a collective it issued (its position comes from
        `sync_collectives`), queued for the background comparison. `gated`: the kernel had not
        seen its (group, op, call site) before and has not issued it yet; whether it must be
        agreed on now (`agree`), its site being new here too."""
        first = self.publisher.queue(event, first_seen=gated)
        if not first and self.links.degraded:  # its followers may be blocked on this one's slot
            self.agreement.skip_degraded(event)
        return first

    def agree(self, event: CollectiveEvent) -> None:
        """Agree on a queued collective with the other ranks before it is issued (see
        `queue_issued`): the issuing thread, with no lock of the tracer's held."""
        self.agreement.agree(event)

    def not_queued(self, count: int) -> None:
        """Collectives the native kernel could not keep for the monitor (its queue was full)."""
        self.comparer.not_compared("the native kernel's queue", count, "it was full")

    def issued_p2p(self, event: CollectiveEvent, check: bool = True) -> None:
        """A send or recv: in flight and in positions like a collective, and paired on its channel
        (strict mode: before it is issued; async mode: on the background thread). `check=False`
        (a group whose members c10d does not know): the peer's rank is a guess, never paired."""
        slot = self.ledger.issue_p2p(event, check)
        if slot is None:
            return
        if self._background:
            self.publisher.queue_slot(slot)
        if self._strict:
            self.agreement.agree_p2p(slot)

    def completed(self, group: str, seq: int) -> None:
        self.ledger.completed(group, seq)

    def sync_collectives(
        self,
        issued: dict[str, int],
        inflight: list[CollectiveEvent],
        last: CollectiveEvent | None,
        last_done: bool,
    ) -> None:
        """Record mode with the native kernel: see Ledger.sync_collectives."""
        self.ledger.sync_collectives(issued, inflight, last, last_done)

    def collective_failed(self) -> None:
        """A collective failed in the backend: if another rank reported why, stop with that."""
        store = self.links.store
        if store is None:
            return
        with contextlib.suppress(Exception):  # the reporter sets the key just before it exits
            self.reporter.sleep_for_abort(store, ABORT_GRACE_S)

    # -- background thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            now = time.time()
            compare = now - self._compared >= self.publisher.compare_every()  # paced for a large world
            if compare:
                self._compared = now
            try:
                self.tick(compare)
            except Exception as error:  # the checker itself failed: keep recording
                if self.links.ended:
                    return
                self._degrade(f"checker failed ({short_error(error)})", True)

    def tick(self, compare: bool = True) -> None:
        """One tick of the background thread: local work every TICK_S; async publication and
        comparison when `compare` (every `pacing(world).compare_s`)."""
        if self._on_tick is not None:
            self._on_tick()
        store = self.links.store
        if store is not None:
            if not self.reporter.waiting_for_abort():
                self.reporter.check_abort(store)
            if self._background and compare:
                relay = self.publisher.relay
                if relay is not None:
                    relay.tick(store)
                    self.publisher.say_relay()
                self.publisher.publish_and_compare(store)
            if self.agreement.has_late():
                self.agreement.check_late(store)
            self.ledger.publish_members(store)
            self.ledger.maybe_publish_position(store)
        self.watchdog.check_stalls()

    # -- degrading to recording only -----------------------------------------------------------

    def _tell_degraded(self, why: str) -> None:
        """Set `degraded/<rank>` so that followers stop waiting for this rank: through our own
        connection (one try each: it may hang until its timeout), else through the job's own store
        client (a rank whose connections were never made, or broke). A strict leader also wakes
        the followers blocked on its next record."""
        links = self.links
        told = None
        for store in (links.store, links.sync):
            if store is None:
                continue
            try:
                store.set(f"degraded/{self.config.rank}", why)
                told = store
                break
            except Exception:
                continue
        if told is None and links.fallback is not None and self.config.verify and not links.ended:
            with contextlib.suppress(Exception):
                job = links.fallback()
                job.set(f"degraded/{self.config.rank}", why)
                told = job
        if told is not None and self.config.verify:
            with contextlib.suppress(Exception):
                self.agreement.release_followers(told)

    def _degrade(self, why: str, loud: bool) -> None:
        links = self.links
        if links.degraded:
            return
        links.degraded = True
        self._tell_degraded(why)
        links.store = None
        links.sync = None
        quiet = links.ended or not loud
        self.reporter.report("degraded", "warning", f"{why}; recording only", echo=not quiet)
