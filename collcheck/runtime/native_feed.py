"""What the native kernel (native_recorder.py) records, handed to the monitor (verify.py).

In: the kernel's in-flight snapshot and, in async verify, every `coll` line it wrote (kept by the
kernel until `drain`) and the line of each collective from a (group, op, call site) it had not
seen, which it hands to `gate` on the issuing thread before issuing it. Out: the monitor's
positions (`sync_collectives`, every tick, record mode and async verify), the collectives queued
for its background comparison in issue order (`queue_issued`), and the first-seen ones agreed on
before they are issued (`agree`). So in async verify the issuing thread pays only the record, and
a divergence at a new call site is still found before the backend sees it.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time

from collcheck.runtime.native_recorder import NativeRecorder
from collcheck.runtime.record import CollectiveEncoder, CollectiveEvent, TraceWriter
from collcheck.runtime.verify import Monitor

TEMPLATE_LIMIT = 4_096  # distinct lines (but number and clock) whose parsed event is kept
# Lines taken between two releases of the GIL: a thread that wants it waits for a release, up to
# the interpreter's switch interval (5 ms), and the issuing thread wants it on every collective.
YIELD_EVERY = 32


class NativeFeed:
    """The native kernel's side of one tracer's monitor."""

    def __init__(
        self,
        native: NativeRecorder,
        writer: TraceWriter,
        encoder: CollectiveEncoder,
        monitor: Monitor,
        verify: bool,
    ) -> None:
        self.native = native
        self.writer = writer
        self.encoder = encoder
        self.monitor = monitor
        self.verify = verify
        self._events: dict[str, CollectiveEvent] = {}  # in-flight line -> its event
        self._last: tuple[str, CollectiveEvent] | None = None
        self._lock = threading.Lock()  # async verify: the kernel's lines reach the monitor in order
        self._known: dict[str, bool] = {}  # group -> c10d knows its members (compared)
        self._templates: dict[str, CollectiveEvent] = {}  # a line but its number and clock -> event

    def tick(self) -> None:
        """The monitor's tick: the deferred `done` lines out, and what the kernel has in flight
        (for positions and stalls); in async verify, what it issued since the last tick."""
        self.flush()
        issued, inflight, last, last_done = self.native.snapshot()
        events = {line: self._events.get(line) or self._event_of(line) for line in inflight}
        self._events = events
        last_event = events.get(last)
        if last_event is None and last:
            if self._last is None or self._last[0] != last:
                self._last = (last, self._event_of(last))
            last_event = self._last[1]
        self.monitor.sync_collectives(issued, list(events.values()), last_event, last_done)
        if self.verify:
            self.take_watched()

    def flush(self) -> None:
        """The kernel's deferred `done` lines, and the count of lines it could not write."""
        self.native.flush()
        self.writer.lost_elsewhere(self.native.lost())

    def gate(self, line: str) -> None:
        """The kernel, on the issuing thread, before the first collective of a (group, op, call
        site) is issued (async verify): the collectives issued before it are queued, then it, and
        it is agreed on with the other ranks if its site is new to the monitor too. No lock is
        held while it waits for them: the monitor's tick goes on meanwhile."""
        try:
            event = self.take_watched(line)
        except Exception as error:  # the tracer must never break the program
            sys.stderr.write(f"collcheck: first-seen check skipped: {type(error).__name__}: {error}\n")
            return
        if event is not None:
            self.monitor.agree(event)

    def take_watched(self, gated: str | None = None) -> CollectiveEvent | None:
        """Hand the collectives the kernel issued since the last call to the monitor, in issue
        order, then the `gated` line's; the collective to agree on before it is issued, if any.
        Collectives of groups whose members c10d does not know are recorded only, as with the
        Python kernel (their guessed leader may not be a member)."""
        agree = None
        with self._lock:
            lines, unwatched = self.native.drain()
            for count, line in enumerate(lines, start=1):
                if count % YIELD_EVERY == 0:
                    time.sleep(0)  # let the issuing thread take the GIL: it walks its frames
                event = self._event_of(line)
                if self._group_known(event.group):
                    self.monitor.queue_issued(event, gated=False)
            if gated is not None:
                event = self._event_of(gated)
                if self._group_known(event.group) and self.monitor.queue_issued(event, gated=True):
                    agree = event
        if unwatched:
            self.monitor.not_queued(unwatched)
        return agree

    def _group_known(self, name: str) -> bool:
        """Whether c10d knows the members of the group `name` (looked up once per group)."""
        known = self._known.get(name)
        if known is None:
            import torch.distributed as dist

            try:
                group = dist.distributed_c10d._resolve_process_group(name)  # type: ignore[attr-defined, arg-type]
                known = bool(dist.get_process_group_ranks(group))
            except Exception:  # a group c10d does not know (built by hand)
                known = False
            self._known[name] = known
        return known

    def _event_of(self, line: str) -> CollectiveEvent:
        """The event of one of the kernel's `coll` lines, with the members its gid names. A loop's
        lines differ only in their number and clock: the rest is parsed once per distinct line
        (JSON escapes every quote inside a string, so the keys found here are the line's own)."""
        head, _, rest = line.partition(',"seq":')
        number, _, tail = rest.partition(",")
        body, _, clock = tail.rpartition('"t_start":')
        key = head + body
        template = self._templates.get(key)
        if template is None:
            row = json.loads(line)
            event = CollectiveEvent.from_json(row)
            known = self.encoder.members(int(row["gid"]))
            if known is not None:
                event.group_ranks, event.group_desc = known
            if len(self._templates) >= TEMPLATE_LIMIT:
                self._templates.clear()
            self._templates[key] = event
            return copy.copy(event)
        event = copy.copy(template)
        event.seq, event.t_start = int(number), float(clock.rstrip("}\n"))
        return event
