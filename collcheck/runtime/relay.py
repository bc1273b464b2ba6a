"""Two-level reads of the leaders' rolling hashes: one relay per node (issue 16).

In async verification every follower reads its publisher's `rh/<channel>` (see verify_wire.py)
once per tick. Read from the job's store, that is one request per follower and tick at one store,
which is why the tick had to lengthen with the world. With a relay, the first rank of each node to
start (a claim in the job store) serves a small TCPStore listening on 127.0.0.1 only; the node's
ranks name there the channels they follow, and at each tick in which one of them asked, the relay reads all of
them from the job store in one `multi_get` and writes them to the node's store in one `multi_set`.
The job store then sees one read per node and tick, however many ranks a node has, and none from
an idle node. A reader's requests to the node's store go through a thread of its own
(`NodeReader`): a relay whose process is stopped never blocks a rank's stall watchdog. Only `rh/`
goes through the relay: records and details (read on a difference, or by a follower that is
behind) still come from the job store directly, and so does every read of a rank's final flush.

Comes in: this rank, its node's name and the node store's port (`RelaySettings`, from the
environment: `relay_settings`), and the job-store client of the monitor's background thread
(`start`, `tick`, `chain`). Goes out: `chain(job, channel)`, the publisher's `rh/` value as the
relay last read it (None while there is none yet); `requesters()`, how many clients read the job
store per tick (relays, publishers and ranks without a relay), for the pace; and `notes`, the
warnings the monitor reports. A relay that cannot be set up, stops refreshing or cannot be reached
makes its ranks read the job store directly, and each says so once: no rank stops comparing.

Keys in the job store (under collcheck's prefix): `relay/<node>` (`claimed <rank>`, then `<rank>
<port>`, or `failed <why>`, or `ended` once the relay's rank stopped); the counters `relays`,
`publishers` and `direct` (ranks without a relay). In a node's store: `want` (channels, one a line,
appended by the ranks that follow them), `demand` (added to by a reader that wants a refresh),
`rh/<channel>` (as in the job store, "" while the publisher has published nothing) and `beat`
(`<time> <requesters>`, written at every tick of the relay).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from collcheck.runtime.verify_wire import chain_key, peek

ENV_NODE = "COLLCHECK_NODE"  # this rank's node (default: the host name)
ENV_RANKS_PER_NODE = "COLLCHECK_RANKS_PER_NODE"  # tests and benches: ranks r // k share node k
ENV_PORT = "COLLCHECK_RELAY_PORT"  # the node store's port (default: any free one)
ENV_RELAY = "COLLCHECK_RELAY"  # 0: no relay (every rank reads the job store); 1: relays at any size
# Below this world size (and unless asked for, by ENV_RELAY=1 or by naming nodes), every follower
# reads the job store itself: 20 requests a second per follower cost one store little, and a
# direct read is a tick or two fresher than a relayed one.
RELAY_MIN_WORLD = 256
SETUP_S = 10.0  # a rank waits this long for its node's relay to say where it is
STALE_S = 10.0  # a relay that has not refreshed for this long (or 20 ticks) is taken for dead
LOOK_S = 0.25  # how often a rank waiting for its relay's address looks for it
CONNECT_S = 5.0  # the node store's connection timeout (it is on this machine)
CHECK_S = 1.0  # a reader that is not asked still reads its relay's beat this often
COUNTERS = ("relays", "publishers", "direct")  # job-store clients that read or write per tick
# What all ranks' background work may ask of one store per second, together (see verify_store.pacing).
STORE_REQUESTS_PER_S = 20_000


class RelayState(Enum):
    PENDING = "pending"  # waiting for the node's relay to say where it is
    HOST = "host"  # this rank is its node's relay
    CLIENT = "client"  # reading the node's store
    DIRECT = "direct"  # no relay: reading the job store, as without one


@dataclass(frozen=True)
class RelaySettings:
    node: str
    port: int = 0
    setup_s: float = SETUP_S
    stale_s: float = STALE_S


def relay_settings(rank: int, environ: Mapping[str, str]) -> RelaySettings | None:
    """This rank's node and the relay's port, from the environment; None when switched off."""
    if environ.get(ENV_RELAY, "").strip().lower() in ("0", "false", "no", "off"):
        return None
    node = environ.get(ENV_NODE, "").strip()
    per_node = environ.get(ENV_RANKS_PER_NODE, "").strip()
    if not node and per_node.isdigit() and int(per_node) > 0:
        node = f"simulated-{rank // int(per_node)}"
    return RelaySettings(node or socket.gethostname(), int(environ.get(ENV_PORT) or 0))


def serve_node_store(port: int) -> Any:
    """The node's store: a TCPStore server on this machine's loopback only (also its host's
    client). A TCPStore server given only a port listens on every interface, where any host of
    the network could read `beat` and write `rh/` keys; so the listening socket is made here,
    bound to 127.0.0.1, and handed over (`master_listen_fd`): only the node's own ranks reach it."""
    import torch.distributed

    c10d: Any = torch.distributed  # TCPStore is re-exported without type stubs
    timeout = timedelta(seconds=CONNECT_S)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(socket.SOMAXCONN)
        bound = listener.getsockname()[1]
        store = c10d.TCPStore(
            "127.0.0.1",
            bound,
            is_master=True,
            timeout=timeout,
            wait_for_workers=False,
            master_listen_fd=listener.fileno(),
        )
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store's server owns the descriptor now and closes it
    return store


def connect_node_store(port: int) -> Any:
    import torch.distributed

    c10d: Any = torch.distributed
    timeout = timedelta(seconds=CONNECT_S)
    return c10d.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout, wait_for_workers=False)


class NodeReader:
    """A reader's connection to its node's store, on a thread of its own: a relay whose process
    is stopped (SIGSTOP, a debugger) leaves requests unanswered, and the monitor's thread, which
    also watches for stalls, must never wait for it. The monitor asks (`ask`) and looks at what
    the thread read last (`values`, `beat`, `read_at`, `failed`); the thread wakes when asked,
    and every CHECK_S to read the beat."""

    def __init__(self, connect: Callable[[int], Any], port: int) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.idle = threading.Event()  # waiting to be asked (tests wait for it)
        self._wanted: list[str] = []  # channels this rank follows, in the order it named them
        self._named = 0  # how many of them are named in the node's `want`
        self._demand = False
        self._closed = False
        self.values: dict[str, bytes | None] = {}  # rh/ key -> what the node's store held
        self.beat: bytes | None = None
        self.read_at = time.monotonic()
        self.failed: str | None = None
        args = (connect, port)
        self._thread = threading.Thread(target=self._run, args=args, name="collcheck-relay", daemon=True)
        self._thread.start()

    def ask(self, channel: str) -> None:
        """Read `channel`'s rolling hash (naming it to the relay the first time) and ask the
        relay to refresh: the answer is in `values` after the thread's next round."""
        with self._lock:
            if channel not in self._wanted:
                self._wanted.append(channel)
            self._demand = True
        self._wake.set()

    def close(self, wait: bool) -> None:
        """End the thread; `wait`: a little for it (at exit: a daemon thread still inside a store
        call when the interpreter exits can abort the process)."""
        self._closed = True
        self._wake.set()
        if wait and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _run(self, connect: Callable[[int], Any], port: int) -> None:
        try:
            node = connect(port)
            while not self._closed:
                self.idle.set()
                self._wake.wait(CHECK_S)
                self.idle.clear()
                self._wake.clear()
                self._round(node)
        except Exception as error:
            self.failed = short_error(error)
        finally:
            self.idle.set()

    def _round(self, node: Any) -> None:
        with self._lock:
            new = self._wanted[self._named :]
            self._named = len(self._wanted)
            keys = [chain_key(channel) for channel in self._wanted]
            demand, self._demand = self._demand, False
        for channel in new:
            node.append("want", channel + "\n")
        values = self.values
        if demand:
            node.add("demand", 1)  # the relay reads the job store at its next tick
            values = {key: peek(node, key) for key in keys}
        beat = peek(node, "beat")
        with self._lock:
            self.values, self.beat, self.read_at = values, beat, time.monotonic()


class NodeRelay:
    """One rank's side of its node's relay: the relay itself on the node's first rank (HOST), a
    reader of the node's store on the others (CLIENT). Used by the monitor's background thread
    only (and never during its final flush, which reads the job store)."""

    def __init__(
        self,
        rank: int,
        settings: RelaySettings,
        serve: Callable[[int], Any] = serve_node_store,
        connect: Callable[[int], Any] = connect_node_store,
    ) -> None:
        self.rank = rank
        self.settings = settings
        self.state = RelayState.PENDING
        self.notes: list[str] = []  # warnings for the monitor to report
        self._serve = serve
        self._connect = connect
        self._node: Any = None  # the node's store (the host holds its server)
        self._key = f"relay/{settings.node}"
        self._since = time.monotonic()  # when this rank began to wait for its relay
        self._looked = 0.0
        self._wanted: dict[str, float] = {}  # channel -> when this rank named it to the relay
        self._known: set[str] = set()  # host: job-store keys that exist (read in the multi_get)
        self._values: dict[str, bytes] = {}  # host: what the last refresh read
        self._requesters: int | None = None
        self._demand = 0  # host: the node's demand counter at the last refresh
        self._asked = 0  # host: its own reads since then
        self._reader: NodeReader | None = None  # a reader's connection to the node's store

    # -- set-up and the per-tick work ----------------------------------------------------------

    def start(self, job: Any) -> None:
        """Claim the node's relay; the first rank of the node to claim it serves the node store."""
        claim = f"claimed {self.rank}"
        try:
            if _text(job.compare_set(self._key, "", claim)) != claim:
                return  # another rank of this node is the relay: wait for its address
        except Exception as error:
            self._fall_back(job, f"claiming it failed: {short_error(error)}")
            return
        try:
            self._node = self._serve(self.settings.port)
            port = int(self._node.port) if hasattr(self._node, "port") else self.settings.port
            for counter in COUNTERS:
                job.add(counter, 1 if counter == "relays" else 0)
            self._known.update(COUNTERS)
            job.set(self._key, f"{self.rank} {port}")
            self.state = RelayState.HOST
        except Exception as error:
            why = f"its node store did not start on port {self.settings.port}: {short_error(error)}"
            with contextlib.suppress(Exception):
                job.set(self._key, f"failed {why}")
            self._fall_back(job, why)

    def tick(self, job: Any) -> None:
        """Once per comparison tick: the relay refreshes the node's store; a reader looks for its
        relay's address, or checks that it is still refreshing."""
        try:
            if self.state is RelayState.HOST:
                self._refresh(job)
            elif self.state is RelayState.PENDING:
                self._resolve(job)
            elif self.state is RelayState.CLIENT:
                self._check_reader(job)
        except Exception as error:  # a relay that fails stops beating: its readers fall back too
            self._fall_back(job, f"its store failed: {short_error(error)}")

    def chain(self, job: Any, channel: str) -> bytes | None:
        """The publisher's `rh/<channel>` value (None while there is none yet): from this node's
        relay, or from the job store when there is no relay. Naming a channel to the relay the
        first time costs one request to the node's store."""
        if self.state is RelayState.PENDING:
            self._resolve(job)
        return self._chain(job, channel, chain_key(channel))

    def _chain(self, job: Any, channel: str, key: str) -> bytes | None:
        if self.state is RelayState.DIRECT:
            return peek(job, key)
        if self.state is RelayState.HOST:
            self._wanted.setdefault(channel, time.monotonic())
            self._asked += 1
            return self._values.get(key) or None
        if self.state is RelayState.PENDING:
            return None  # compared once the relay is there (or this rank gave up on it)
        reader = self._reader
        assert reader is not None
        asked = self._wanted.setdefault(channel, time.monotonic())
        reader.ask(channel)
        self._check_reader(job)
        raw = reader.values.get(key)
        if raw is None and time.monotonic() - asked > self._stale_s():
            self._fall_back(job, f"it did not relay {channel} for {self._stale_s():.0f} s")
        if self._direct():
            return peek(job, key)
        return raw or None  # None: not relayed yet, b"": relayed, nothing published

    def _direct(self) -> bool:
        return self.state is RelayState.DIRECT

    def requesters(self) -> int | None:
        """How many clients read or write the job store per tick, as the relay last counted
        (None: unknown, or no relay)."""
        if self.state in (RelayState.HOST, RelayState.CLIENT):
            return self._requesters
        return None

    def close(self, job: Any) -> None:
        """This rank stops: a relay says so, so that its readers fall back without a warning. Its
        server stays up while the process does (readers may still be finishing)."""
        if self.state is RelayState.HOST:
            with contextlib.suppress(Exception):
                job.set(self._key, "ended")
        if self._reader is not None:
            self._reader.close(wait=True)

    # -- the relay -----------------------------------------------------------------------------

    def _refresh(self, job: Any) -> None:
        """When a rank of the node asked since the last refresh (`demand`): read every wanted
        `rh/` key (one multi_get of those that exist; a look at each that did not yet) and the
        counters. Write them and a beat to the node's store in one multi_set; only the beat when
        nobody asked (an idle node asks the job store nothing)."""
        demand = int(self._node.add("demand", 0)) + self._asked
        beat = f"{time.time():.3f} {self._requesters or 0}"
        if demand == self._demand:
            self._node.set("beat", beat)
            return
        self._demand, self._asked = demand, 0
        raw = peek(self._node, "want")
        for channel in _text(raw).split("\n") if raw else ():
            if channel:
                self._wanted.setdefault(channel, time.monotonic())
        keys = [*COUNTERS, *(chain_key(channel) for channel in self._wanted)]
        known = [key for key in keys if key in self._known]
        values = dict(zip(known, job.multi_get(known), strict=True)) if known else {}
        for key in keys:
            if key not in self._known:
                found = peek(job, key)
                if found is not None:
                    self._known.add(key)
                    values[key] = found
        self._values = values
        self._requesters = sum(_count(values.get(counter)) for counter in COUNTERS)
        relayed = [key for key in keys if key.startswith("rh/")]
        beat = f"{time.time():.3f} {self._requesters}"
        self._node.multi_set([*relayed, "beat"], [*(_text(values.get(key, b"")) for key in relayed), beat])

    # -- a reader ------------------------------------------------------------------------------

    def _resolve(self, job: Any) -> None:
        """Look (at most every LOOK_S) for the relay's address; connect when it is there; fall
        back when it failed, ended, or did not come within `setup_s`."""
        now = time.monotonic()
        if now - self._looked < LOOK_S:
            return
        self._looked = now
        said = _text(peek(job, self._key) or b"")
        if said.startswith("failed "):
            self._fall_back(job, f"its relay failed to start: {said[len('failed ') :]}")
        elif said == "ended":
            self._fall_back(job, "its relay had already stopped")
        elif said and not said.startswith("claimed "):
            self._reader = NodeReader(self._connect, int(said.split(" ")[-1]))
            self.state = RelayState.CLIENT
        elif now - self._since > self.settings.setup_s:
            self._fall_back(job, f"its relay did not start within {self.settings.setup_s:.0f} s")

    def _check_reader(self, job: Any) -> None:
        """Fall back when the reader's connection failed, stopped answering, or reads a beat that
        the relay no longer refreshes; else take the relay's count of job-store clients."""
        reader = self._reader
        assert reader is not None
        now, stale = time.monotonic(), self._stale_s()
        if reader.failed is not None:
            self._fall_back(job, f"its store failed: {reader.failed}")
        elif now - reader.read_at > stale + CHECK_S:  # an idle reader reads every CHECK_S
            self._fall_back(job, f"its store did not answer for {now - reader.read_at:.1f} s")
        elif reader.beat is None:
            if now - self._since > stale:
                self._fall_back(job, "it never refreshed")
        else:
            when, _, requesters = _text(reader.beat).partition(" ")
            self._requesters = int(requesters) if requesters.isdigit() else None
            age = time.time() - _seconds(when)
            if age > stale:
                self._fall_back(job, f"it has not refreshed for {age:.1f} s")

    def _stale_s(self) -> float:
        every = (self._requesters or 0) / STORE_REQUESTS_PER_S  # the relay's pace
        return max(self.settings.stale_s, 20 * every)

    def _fall_back(self, job: Any, why: str) -> None:
        """Read the job store directly from now on; say so, unless the relay's rank ended."""
        if self.state is RelayState.DIRECT:
            return
        ended = self.state is RelayState.CLIENT and _said(job, self._key) == "ended"
        self.state = RelayState.DIRECT
        self._node = None
        if self._reader is not None:
            self._reader.close(wait=False)  # on the monitor's thread: never wait for a hung store
        with contextlib.suppress(Exception):
            job.add("direct", 1)  # one more client that reads the job store every tick
        if not ended:
            self.notes.append(
                f"node relay unavailable on node {self.settings.node} ({why}): reading the "
                "leaders' rolling hashes from the job store directly; still comparing"
            )


def node_relay(
    rank: int, world_size: int, async_verify: bool, environ: Mapping[str, str]
) -> NodeRelay | None:
    """The relay side of a rank of an async-verifying job of RELAY_MIN_WORLD ranks or more, or
    of any size when the environment asks for relays (COLLCHECK_RELAY=1, or nodes named by
    COLLCHECK_NODE or COLLCHECK_RANKS_PER_NODE); None when it switches them off."""
    if not async_verify or world_size < 2:
        return None
    asked = environ.get(ENV_RELAY, "").strip().lower() in ("1", "true", "yes", "on")
    named = bool(environ.get(ENV_NODE, "").strip() or environ.get(ENV_RANKS_PER_NODE, "").strip())
    if world_size < RELAY_MIN_WORLD and not (asked or named):
        return None
    settings = relay_settings(rank, environ)
    return NodeRelay(rank, settings) if settings is not None else None


def _said(job: Any, key: str) -> str:
    try:
        return _text(peek(job, key) or b"")
    except Exception:
        return ""


def _seconds(text: str) -> float:
    """A beat's time; 0 (long ago) when it is not one: a garbled beat counts as a stale one."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def _count(raw: bytes | None) -> int:
    text = _text(raw or b"0")
    return int(text) if text.isdigit() else 0


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")


def short_error(error: BaseException) -> str:
    """`TypeName: first line of its message`, at most 200 characters (for warnings)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]
