"""How one rank's monitor reports and how a report ends the job: a line in the trace (and, for an
error, a datagram to `collcheck run`'s listener, liveline.py), and the abort protocol of
verify_protocol.py: the first rank to find an error sets `abort` and every other rank's
`wake/<rank>`, and each rank's abort waiter, blocked in the store's wait for its own `wake/` key,
ends its process with the reporter's first line.

In: findings (kind, severity, text) from the rest of the monitor; the rank's Connections.
Out: `report` lines in the trace, the wake and abort keys, and the end of the process
(ABORT_EXIT_CODE) when the tracer is configured to abort.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from collcheck.runtime import liveline
from collcheck.runtime.record import ReportEvent, TraceWriter
from collcheck.runtime.verify_store import TICK_S, Connections
from collcheck.runtime.verify_wire import peek

ABORT_EXIT_CODE = 86
ABORT_WAIT = timedelta(days=365)  # a blocked wait for an abort never expires in a job's life
WAKE_STOP = "\x00collcheck:stop"  # what a rank writes to its own wake key to end its abort waiter
ABORT_GRACE_S = 0.5
ABORT_LINGER_S = 3.0


@dataclass
class MonitorConfig:
    rank: int
    verify: bool
    strict: bool
    timeout_s: float
    world_size: int = 1
    abort: bool = True
    report_socket: str | None = None  # `collcheck run`'s listener (liveline.py), if any


class Reporter:
    """Writes this rank's reports and ends the job on an error (when configured to abort): its own
    and, through the abort waiter, another rank's."""

    def __init__(
        self,
        config: MonitorConfig,
        writer: TraceWriter,
        links: Connections,
        stopping: threading.Event,
        before_exit: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.writer = writer
        self.links = links
        self._stopping = stopping  # the monitor is stopping: a woken waiter ends quietly
        self._before_exit = before_exit  # the native kernel's deferred lines, before os._exit
        self.reporting = False  # this rank set the abort: it must linger, not stop on its own key
        self.waiter: threading.Thread | None = None

    def report(self, kind: str, severity: str, text: str, echo: bool) -> None:
        self.writer.write(ReportEvent(kind, severity, text, time.time(), self.config.rank).to_json())
        if severity == "error":  # a copy that a full trace folder cannot lose
            liveline.send(self.config.report_socket, self.config.rank, kind, text)
        if echo:
            _echo(f"collcheck: rank {self.config.rank}: {text}")

    def fail(self, kind: str, text: str) -> None:
        self.report(kind, "error", text, echo=True)
        if not self.config.abort:
            return
        self.reporting = True
        links = self.links
        if links.store is not None or links.sync is not None:
            store = (
                links.sync
                if threading.current_thread() is threading.main_thread() and links.sync is not None
                else links.store
            )
            report = f"rank {self.config.rank}: {text}"
            try:
                # The other ranks' wake keys first: a host that exits the moment `abort` appears
                # (it saw it by polling) has then woken every waiter already.
                self._wake_all(store, report)
                store.compare_set("abort", "", report)
                self._linger(store)
            except Exception:
                pass
        self.finish(None, None, echo=False)

    def _linger(self, store: Any) -> None:
        """Stay up until the other ranks have seen the abort: this rank may be hosting the store."""
        deadline = time.time() + ABORT_LINGER_S
        while time.time() < deadline and int(store.add("abort_ack", 0)) < self.config.world_size - 1:
            time.sleep(TICK_S)

    def finish(self, kind: str | None, text: str | None, echo: bool) -> None:
        """End this process: a finding was made here or on another rank."""
        if kind is not None and text is not None:
            self.report(kind, "error", text, echo=echo)
        if self._before_exit is not None:
            with contextlib.suppress(Exception):
                self._before_exit()
        self.writer.close()
        sys.stderr.flush()
        os._exit(ABORT_EXIT_CODE)

    def check_abort(self, store: Any) -> None:
        """Poll for an abort (the fallback when the abort waiter is not running)."""
        if self.reporting or not store.check(["abort"]):
            return
        self._aborted(store, store.get("abort").decode("utf-8", "replace"))

    def _aborted(self, store: Any, text: str) -> None:
        """Another rank reported an error: acknowledge it and end this process."""
        first = text.splitlines()[0] if text else "an error"
        try:  # tell the reporter we saw it: it may host the store and waits before exiting
            store.add("abort_ack", 1)
            if self.config.rank == 0:  # the usual host of the store: stay until all have seen it
                self._linger(store)
            else:
                time.sleep(3 * TICK_S)  # give the reporter time to read the ack
        except Exception:
            pass
        self.finish("aborted", f"stopping: {first}", echo=True)

    def start_waiter(self) -> None:
        """Start the abort waiter, when the rank has a connection for it."""
        if self.links.abort is not None:
            self.waiter = threading.Thread(target=self._await_abort, name="collcheck-abort", daemon=True)
            self.waiter.start()

    def waiting_for_abort(self) -> bool:
        """Whether the abort waiter is blocked in its wait (else the tick polls)."""
        return self.waiter is not None and self.waiter.is_alive()

    def _await_abort(self) -> None:
        """The abort waiter's thread. Blocked in the store's wait for `wake/<rank>`, which the
        first rank to report an error sets for every rank (to its report's first line) and this
        rank sets itself when it stops: one request per abort, where polling asked the store 20
        times a second, and the abort is learned the moment it is set, even if the store's host
        exits right after (the wait's answer is already here). If the connection breaks, the
        thread ends and the tick polls instead (and finds the store gone, as before)."""
        store, key = self.links.abort, f"wake/{self.config.rank}"
        try:
            if peek(store, key) == WAKE_STOP.encode():  # left by an earlier tracer in this process
                store.delete_key(key)
            store.wait([key], ABORT_WAIT)
        except Exception:
            return
        if self._stopping.is_set():
            return
        try:
            raw = peek(store, key)
        except Exception:  # woken, but the store went away before the text could be read
            raw = b"another rank reported an error (the store closed before its report was read)"
        text = (raw or b"").decode("utf-8", "replace")
        if self._stopping.is_set() or text == WAKE_STOP or self.reporting:
            return
        self._aborted(store, text)

    def _wake_all(self, store: Any, text: str) -> None:
        """Set every other rank's `wake/<rank>` to the report's first line (one request)."""
        first = (text.splitlines() or ["an error"])[0][:500]
        keys = [f"wake/{rank}" for rank in range(self.config.world_size) if rank != self.config.rank]
        if keys:
            store.multi_set(keys, [first] * len(keys))

    def stop_waiter(self) -> None:
        """Wake this rank's own abort waiter so that its thread ends (it is a daemon thread: a
        waiter that cannot be woken, its store gone, never keeps the process alive)."""
        waiter = self.waiter
        if waiter is None or not waiter.is_alive():
            return
        links = self.links
        fallback = links.fallback
        for get in (lambda: links.store, lambda: links.sync, fallback):  # the job's own, last
            try:
                store = get() if get is not None else None
                if store is not None:
                    store.set(f"wake/{self.config.rank}", WAKE_STOP)
                    break
            except Exception:
                continue
        waiter.join(timeout=2.0)

    def sleep_for_abort(self, store: Any, seconds: float) -> None:
        """Give another rank's abort `seconds` to arrive: the waiter ends this process when it
        does; without a waiter, poll for it."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            if not self.waiting_for_abort():
                self.check_abort(store)
            time.sleep(TICK_S)


def _echo(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:
        pass
