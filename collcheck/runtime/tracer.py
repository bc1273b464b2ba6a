"""The per-process tracer: turns intercepted c10d calls into events, feeds the writer and monitor.

Only imported once torch.distributed is in use (by `enable` or by the bootstrap after
`init_process_group`), so processes that never touch torch never import it because of collcheck.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from collcheck.runtime import liveline, native_recorder, verify_store
from collcheck.runtime.hook import OpSpec, call_site, install, reduce_code
from collcheck.runtime.native_feed import NativeFeed
from collcheck.runtime.record import (
    ENV_ALLOW_SHARED_DIR,
    SCHEMA_VERSION,
    CollectiveEncoder,
    CollectiveEvent,
    TraceFormat,
    TraceWriter,
    shared_dir_allowed,
    trace_file_name,
)
from collcheck.runtime.relay import node_relay
from collcheck.runtime.trace_binary import binary_name
from collcheck.runtime.trace_live import ENV_FORMAT, BinaryTraceWriter, trace_format_of
from collcheck.runtime.verify import Monitor, MonitorConfig

DEFAULT_TRACE_DIR = "collcheck-trace"
DEFAULT_TIMEOUT_S = 300.0
STORE_CONNECT_TIMEOUT_S = 3.0  # the job store was just reachable; only overrides can be slow
# At stop, how long record mode waits for collectives still running (async ops not waited for).
STOP_GRACE_S = 0.2
P2P_WAITS_LIMIT = 1024  # send/recv Works watched through wait() at once (see Tracer.attach)

# RedOpType numbering of c10d (stable since torch 1.x): the ReduceOp object only exposes the number.
REDUCE_NAMES = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")


@dataclass(frozen=True)
class TraceConfig:
    trace_dir: str = DEFAULT_TRACE_DIR
    verify: bool = False
    strict: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    store_address: str | None = None  # host:port; default: the job's own store
    abort: bool = True  # end the job on an error (mismatch, stall) instead of only reporting it
    native: bool = True  # record and async verify: the C++ kernel (native_recorder.py) where built
    allow_shared_dir: bool = False  # write into a world-writable folder owned by another user
    trace_format: TraceFormat = TraceFormat.JSON

    @property
    def uses_native(self) -> bool:
        """Strict mode keeps the Python kernel: it agrees on every collective before issuing it.
        (A binary trace is written by the native kernel's encoder: BinaryTraceWriter.use_native.)"""
        return self.native and not self.strict

    @property
    def mode(self) -> str:
        if not self.verify:
            return "record"
        return "strict" if self.strict else "async"


ENV_TRACE = "COLLCHECK_TRACE"
ENV_DIR = "COLLCHECK_TRACE_DIR"
ENV_VERIFY = "COLLCHECK_VERIFY"
ENV_STRICT = "COLLCHECK_STRICT"
ENV_TIMEOUT = "COLLCHECK_TIMEOUT"
ENV_STORE = "COLLCHECK_STORE"
ENV_ABORT = "COLLCHECK_ABORT"
ENV_NATIVE = "COLLCHECK_NATIVE"


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def config_from_env(environ: dict[str, str] | None = None) -> TraceConfig:
    env = os.environ if environ is None else environ
    strict = _flag(env.get(ENV_STRICT))
    return TraceConfig(
        trace_dir=env.get(ENV_DIR) or DEFAULT_TRACE_DIR,
        verify=_flag(env.get(ENV_VERIFY)) or strict,
        strict=strict,
        timeout_s=float(env.get(ENV_TIMEOUT) or DEFAULT_TIMEOUT_S),
        store_address=env.get(ENV_STORE) or None,
        abort=env.get(ENV_ABORT, "1") != "0",
        native=env.get(ENV_NATIVE, "1").strip().lower() not in ("0", "false", "no", "off"),
        allow_shared_dir=shared_dir_allowed(env),
        trace_format=trace_format_of(env.get(ENV_FORMAT)),
    )


def config_to_env(config: TraceConfig) -> dict[str, str]:
    env = {
        ENV_TRACE: "1",
        ENV_DIR: os.path.abspath(config.trace_dir),
        ENV_VERIFY: "1" if config.verify else "0",
        ENV_STRICT: "1" if config.strict else "0",
        ENV_TIMEOUT: str(config.timeout_s),
        ENV_ABORT: "1" if config.abort else "0",
        ENV_NATIVE: "1" if config.native else "0",
    }
    if config.trace_format is not TraceFormat.JSON:  # the default's environment stays as it was
        env[ENV_FORMAT] = config.trace_format.value
    if config.store_address:
        env[ENV_STORE] = config.store_address
    if config.allow_shared_dir:
        env[ENV_ALLOW_SHARED_DIR] = "1"
    return env


@dataclass(frozen=True)
class _Group:
    name: str
    desc: str
    ranks: tuple[int, ...]
    known: bool = True  # c10d knows its members; otherwise they are a guess, never cross-checked


class Tracer:
    """Implements the hook's Sink: one instance per process.

    Completion. Strict mode (and async mode without the native kernel configured) adds a
    callback to each Work's future, which gloo runs on its worker thread (taking the GIL) before
    `wait()` returns. Record mode and async mode keep that off the collective's path: they note
    the completion when `Work.wait()` returns in Python (the blocking `torch.distributed` calls),
    and poll the future's `done()` for the rest (DDP's buckets, functional collectives, async ops)
    when the next collective is issued and on every monitor tick, so their `t_end` may be up to
    one tick (50 ms) late; the native kernel notes them in C++.

    With the native kernel, what it records reaches the monitor through a NativeFeed
    (native_feed.py): in async verify the issuing thread pays only the record.
    """

    def __init__(self, config: TraceConfig, rank: int, world_size: int) -> None:
        import torch
        from torch._C import _distributed_c10d as c10d_c

        self.config = config
        self.rank = rank
        self.world_size = world_size
        self._process_group_type = c10d_c.ProcessGroup
        self._work_type = c10d_c.Work
        self._script_object = torch.ScriptObject
        self._groups: dict[str, _Group] = {}
        self._backends: dict[int, tuple[Any, _Group]] = {}  # id(backend object) -> (it, its group)
        self._seq: dict[str, int] = {}
        self._lock = threading.Lock()
        self._main = threading.main_thread().ident
        self._tensor_type = torch.Tensor
        self._dtypes: dict[Any, str] = {}
        if config.trace_format is TraceFormat.BINARY:
            path = os.path.join(config.trace_dir, binary_name(rank))
            self.writer: TraceWriter = BinaryTraceWriter(path, config.allow_shared_dir)
        else:
            path = os.path.join(config.trace_dir, trace_file_name(rank))
            self.writer = TraceWriter(path, config.allow_shared_dir)
        self.encoder = CollectiveEncoder(rank)
        # Works whose completion is not yet noted (see the class docstring).
        self._poll_completion = config.uses_native or not config.verify
        # work -> [event, its future (asked for at the first poll)]
        self._pending: dict[Any, list[Any]] = {}
        self._observable: dict[tuple[str, str], bool] = {}  # (group, op) -> the backend gives futures
        self._pending_lock = threading.Lock()
        self._p2p_waits: dict[Any, CollectiveEvent] = {}  # send/recv Works without a future
        self.native: native_recorder.NativeRecorder | None = None
        self.feed: NativeFeed | None = None  # what the native kernel records, to the monitor
        self.monitor = Monitor(
            MonitorConfig(
                rank,
                config.verify,
                config.strict,
                config.timeout_s,
                world_size,
                config.abort,
                os.environ.get(liveline.ENV_SOCKET) or None,
            ),
            self.writer,
            lambda: verify_store.connect_store(config.store_address, STORE_CONNECT_TIMEOUT_S),
            on_tick=self._record_tick if self._poll_completion else None,
            before_exit=self._flush_native,
            relay=node_relay(rank, world_size, config.verify and not config.strict, os.environ),
        )
        self.mechanism = ""

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        # Kernels stay registered for the life of the process; they reach whichever tracer is active.
        module = self._native_module() if self.config.uses_native else None
        self.mechanism = install(_FORWARD, native=module)
        if self.mechanism == "native" and module is not None:
            self.native = native_recorder.NativeRecorder(module, self.rank, self._main, self.encoder)
            self.feed = NativeFeed(self.native, self.writer, self.encoder, self.monitor, self.config.verify)
        _FORWARD.route(self)  # with the native kernel, sends and recvs still come here
        _patch_existing_backends()
        self.writer.write(self._header())
        if self.native is not None:
            assert self.feed is not None
            binary = None
            if isinstance(self.writer, BinaryTraceWriter):  # the kernel encodes the file from here on
                binary = self.writer.use_native(self.native.module)
            self.native.start(self.writer.fileno(), self.feed.gate if self.config.verify else None, binary)
        self.monitor.start()

    def _native_module(self) -> Any:
        """The built native kernel, or None: never built here, where a peer would wait for it."""
        module = native_recorder.load(build=False)
        if module is not None:
            return module
        if os.environ.get("LOCAL_RANK", str(self.rank)) != "0":  # one builder and message per node
            return None
        status = native_recorder.build_in_background()
        if status == "started":
            native_recorder.warn(
                "this run uses the Python kernel; the native kernel is being built "
                "in the background for later runs (`python -m collcheck.runtime.native build` "
                "builds it ahead of time, e.g. as a step of a container image build)"
            )
        elif status != "unavailable":
            native_recorder.warn(
                f"native recorder: an earlier build failed (see {status}; delete it to retry); "
                "using the Python kernel"
            )
        return None

    def _header(self) -> dict[str, Any]:
        import torch

        return {
            "ev": "header",
            "schema": SCHEMA_VERSION,
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "argv": sys.argv,
            "mode": self.config.mode,
            "timeout_s": self.config.timeout_s,
            "torch": torch.__version__,
            "hook": self.mechanism,
            "t": time.time(),
            "cwd": os.getcwd(),
        }

    def stop(self) -> None:
        self.monitor.ended = True
        self._drain(STOP_GRACE_S)
        if self.native is not None:
            self.native.stop()
            self.writer.lost_elsewhere(self.native.lost())
            if self.feed is not None and self.config.verify:  # the last ones, for the final comparison
                self.feed.take_watched()
        self.monitor.stop(exited=True)
        self.writer.write({"ev": "exit", "t": time.time()})
        self.writer.close()

    # -- Sink ----------------------------------------------------------------------------------

    def begin(
        self,
        spec: OpSpec,
        group: Any,
        tensors: list[Any],
        reduce_op: int | None,
        root: int | None,
        tag: int | None = None,
    ) -> CollectiveEvent | None:
        plain = self._tensor_type
        for tensor in tensors:  # tracing/compiling, not a real collective
            if (type(tensor) is not plain or tensor.is_meta) and _is_fake(tensor, plain):
                return None
        if self._pending:  # note what completed since: its line comes before this collective's
            self.poll_completions()
        info = self._group(group)
        return self._issue(spec, info, info.name, tensors, reduce_op, root, tag)

    def _issue(
        self,
        spec: OpSpec,
        info: _Group,
        name: str,
        tensors: list[Any],
        reduce_op: int | None,
        root: int | None,
        tag: int | None,
    ) -> CollectiveEvent:
        """Number, write and hand to the monitor one collective of sequence `name` (`info`'s
        members; `:p2p` is added for a send or recv)."""
        if spec.p2p:
            name = f"{name}:p2p"
        with self._lock:
            seq = self._seq.get(name, 0) + 1
            self._seq[name] = seq
        root_global = _to_global(root, info.ranks)
        ranks = (
            tuple(sorted({self.rank, root_global})) if spec.p2p and root_global is not None else info.ranks
        )
        event = CollectiveEvent(
            rank=self.rank,
            group=name,
            group_ranks=ranks,
            seq=seq,
            op=spec.label,
            shapes=tuple(tuple(t.shape) for t in tensors) if spec.shapes else (),
            dtypes=tuple(self._dtype_name(t.dtype) for t in tensors),
            reduce_op=REDUCE_NAMES[reduce_op]
            if reduce_op is not None and 0 <= reduce_op < len(REDUCE_NAMES)
            else None,
            root=root_global,
            site=call_site(self._main),
            thread=threading.current_thread().name,
            t_start=time.time(),
            group_desc=info.desc,
            tag=tag,
        )
        self.writer.write_coll(*self.encoder.coll(event))
        if spec.p2p:  # paired with its peer's recv/send, not with the group's collectives
            self.monitor.issued_p2p(event, check=info.known)
        else:
            self.monitor.issued(event, check=info.known)
        return event

    def begin_backend(
        self,
        spec: OpSpec,
        backend: str,
        instance: Any,
        tensors: list[Any],
        reduce_op: Any,
        root: int | None,
        tag: int | None,
    ) -> CollectiveEvent | None:
        """A collective called on a registered backend's object directly (backends.py), in the
        sequence `<backend>:<group>`; None for tensors of tracing or compiling."""
        plain = self._tensor_type
        if any(_is_fake(tensor, plain) for tensor in tensors):
            return None
        info = self._backend_group(instance, backend)
        return self._issue(spec, info, info.name, tensors, reduce_code(reduce_op), root, tag)

    def _backend_group(self, instance: Any, backend: str) -> _Group:
        """The c10d group a backend object serves, found once per object in c10d's groups (the
        object is held, so its id stays its own); members unknown (never compared) if none."""
        known = self._backends.get(id(instance))
        if known is not None:
            return known[1]
        import torch.distributed as dist

        found = _Group(f"{backend}:?", type(instance).__name__, _guessed_ranks(instance), False)
        for group in list(dist.distributed_c10d._world.pg_map):
            if any(_backend_of(group, device) is instance for device in getattr(group, "_device_types", ())):
                ranks = _ranks(group)
                found = _Group(f"{backend}:{group.group_name}", type(instance).__name__, ranks, bool(ranks))
                break
        self._backends[id(instance)] = (instance, found)
        return found

    def unobserved(self, event: CollectiveEvent) -> None:
        """The backend offers no completion for this collective: never a stall."""
        self.writer.write({"ev": "unobserved", "group": event.group, "seq": event.seq})
        self.monitor.completed(event.group, event.seq)

    def finished(self, event: CollectiveEvent, ok: bool) -> None:
        """A call that returned (or raised) after communicating: its completion."""
        self._done(event, ok)

    def begin_creation(
        self, op: str, parent: Any, local: tuple[int, ...] | None, asked: str
    ) -> CollectiveEvent:
        """A group creation (groups.py) about to run: its `coll` line, and the monitor compares it
        and watches it like a collective. Its sequence is `<parent>:create`, whose members are the
        parent's ranks, or `<parent>:create:<r0-r1-...>` when only the new group's members take part
        (`use_local_synchronization`)."""
        import torch.distributed as dist

        info = self._group(parent if parent is not None else dist.distributed_c10d._get_default_group())
        name, ranks = f"{info.name}:create", info.ranks
        if local is not None:
            name, ranks = f"{name}:{'-'.join(map(str, local))}", tuple(sorted(local))
        with self._lock:
            seq = self._seq.get(name, 0) + 1
            self._seq[name] = seq
        event = CollectiveEvent(
            rank=self.rank,
            group=name,
            group_ranks=ranks,
            seq=seq,
            op=op,
            shapes=(),
            dtypes=(),
            site=call_site(self._main),
            thread=threading.current_thread().name,
            t_start=time.time(),
            group_desc="group creation",
            args=asked,
        )
        self.writer.write_coll(*self.encoder.coll(event))
        self.monitor.issued(event, check=info.known and self.rank in ranks)
        return event

    end_creation = finished

    def attach(self, token: object, work: Any) -> None:
        if not isinstance(token, CollectiveEvent):
            return
        if work is None:  # python fallback: the call has returned, so it has completed
            self._done(token, True)
            return
        try:
            if isinstance(work, self._script_object):
                work = self._work_type.unbox(work)
            if self._poll_completion:
                # Record mode asks for the future only when it polls: most works are waited for
                # from Python right away, and creating the future wrapper costs more than the
                # rest of this method. Whether the backend offers one is learnt once per group/op.
                observable = self._observable.get((token.group, token.op))
                if observable is None:
                    work.get_future()  # raises where the backend offers none
                    self._observable[(token.group, token.op)] = True
                elif not observable:
                    raise RuntimeError("no future")
                with self._pending_lock:
                    self._pending[work] = [token, None]
                return
            future = work.get_future()
        except Exception:  # e.g. gloo's reduce_scatter_tensor: "Work::getFuture not implemented"
            self._observable[(token.group, token.op)] = False
            # Gloo's send/recv Works have no future either, but complete in wait(), which is how
            # a recv that never gets its send is told from a finished one (see `waited`).
            if token.group.endswith(":p2p") and len(self._p2p_waits) < P2P_WAITS_LIMIT:
                self._p2p_waits[work] = token
                return
            self.writer.write({"ev": "unobserved", "group": token.group, "seq": token.seq})
            self.monitor.completed(token.group, token.seq)  # cannot watch it: never call it a stall
            return
        future.add_done_callback(lambda done: self._done(token, _succeeded(done)))

    def waited(self, work: Any, raised: bool) -> None:
        """`work.wait()` returned or raised in Python (record mode notes the completion here).

        A returned wait is a completion, as a completed future was before (for NCCL both only mean
        that the current stream waits for the collective). A raised one is a failure if the work
        completed, and a timeout, which leaves it pending, if not.
        """
        if self._p2p_waits and self._p2p_waited(work, raised):
            return
        if raised and self.native is not None and work not in self._pending and work.is_completed():
            # The native kernel noted the failure; as `_done` does for the Python kernel, end with
            # the report of a rank that stopped the job rather than with the backend's error.
            self.monitor.collective_failed()
            return
        if not self._pending or (raised and not work.is_completed()):
            return
        with self._pending_lock:
            pending = self._pending.pop(work, None)
        if pending is not None:
            self._done(pending[0], not raised, defer=True)

    def _p2p_waited(self, work: Any, raised: bool) -> bool:
        """Whether `work` is a watched send/recv Work; notes its completion (or failure)."""
        event = self._p2p_waits.get(work)
        if event is None:
            return False
        if (not raised or work.is_completed()) and self._p2p_waits.pop(work, None) is not None:
            self._done(event, not raised)
        return True

    def poll_completions(self) -> None:
        """Note every pending work that has completed (issuing thread and monitor thread)."""
        if not self._pending:
            return
        with self._pending_lock:
            finished = [
                (work, pending) for work, pending in self._pending.items() if _future_done(work, pending)
            ]
            for work, _ in finished:
                del self._pending[work]
        now = time.time()
        for _, (event, future) in finished:
            self._done(event, _succeeded(future), now, defer=True)

    def _record_tick(self) -> None:
        """The monitor's tick in record mode: note completions, write the deferred `done` lines."""
        self.poll_completions()  # with the native kernel: sends and recvs (the Python kernel's)
        self.writer.flush()
        if self.feed is not None:
            self.feed.tick()

    def _flush_native(self) -> None:
        """Before the monitor ends the process: the native kernel's deferred `done` lines."""
        if self.feed is not None:
            self.feed.flush()

    def _drain(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        self.poll_completions()
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.001)
            self.poll_completions()
        while self.native is not None and self.native.snapshot()[1] and time.monotonic() < deadline:
            time.sleep(0.001)

    def _done(
        self, event: CollectiveEvent, ok: bool, t_end: float | None = None, defer: bool = False
    ) -> None:
        """`defer` (record mode): the line goes out with the next one, or at the next tick."""
        when = time.time() if t_end is None else t_end
        line = self.encoder.done(event.group, event.seq, when, ok)
        if defer and ok:  # a failure is written at once: the process may be about to end
            self.writer.defer_line(line)
        else:
            self.writer.write_line(line)
        self.monitor.completed(event.group, event.seq)
        if not ok:  # often a peer that collcheck stopped: end with its report, not a backend error
            self.monitor.collective_failed()

    def _dtype_name(self, dtype: Any) -> str:
        name = self._dtypes.get(dtype)
        if name is None:
            name = self._dtypes[dtype] = str(dtype).removeprefix("torch.")
        return name

    def _group(self, group: Any) -> _Group:
        if isinstance(group, self._script_object):
            group = self._process_group_type.unbox(group)
        name = str(group.group_name)
        known = self._groups.get(name)
        if known is None:
            ranks = _ranks(group)
            known = self._groups[name] = _Group(
                name, _desc(group), ranks or _guessed_ranks(group), bool(ranks)
            )
        return known


def _patch_existing_backends() -> None:
    """Registered backends created before the tracer started (backends.py)."""
    try:
        from collcheck.runtime.backends import patch_existing

        patch_existing()
    except Exception as error:  # tracing the c10d operators does not depend on it
        sys.stderr.write(f"collcheck: backend calls not traced: {type(error).__name__}: {error}\n")


def _backend_of(group: Any, device: Any) -> Any:
    try:
        return group._get_backend(device)
    except Exception:
        return None


def _is_fake(tensor: Any, plain: Any) -> bool:
    if type(tensor) is plain:  # the common case; FakeTensor and other wrappers are subclasses
        return bool(tensor.is_meta)
    return bool(getattr(tensor, "is_meta", False)) or hasattr(tensor, "fake_mode")


def _future_done(work: Any, pending: list[Any]) -> bool:
    """Whether a pending work has completed; its future is asked for once, at the first poll."""
    future = pending[1]
    if future is None:
        try:
            future = pending[1] = work.get_future()
        except Exception:  # seen to offer one before; count it as done rather than as a stall
            pending[1] = _NO_FUTURE
            return True
    return bool(future.done())


class _NoFuture:
    """Stands in for a future the backend would not give at poll time: done, and ok."""

    def done(self) -> bool:
        return True

    def value(self) -> None:
        return None


_NO_FUTURE = _NoFuture()


def _succeeded(future: Any) -> bool:
    try:
        future.value()
    except Exception:
        return False
    return True


def _to_global(local: int | None, ranks: tuple[int, ...]) -> int | None:
    if local is None:
        return None
    return ranks[local] if 0 <= local < len(ranks) else local


def _desc(group: Any) -> str:
    try:
        return str(group.group_desc)
    except Exception:
        return ""


def _ranks(group: Any) -> tuple[int, ...]:
    import torch.distributed as dist

    try:
        return tuple(dist.get_process_group_ranks(group))
    except Exception:  # a group c10d does not know (built by hand)
        return ()


def _guessed_ranks(group: Any) -> tuple[int, ...]:
    """For the trace only: 0..size-1. Its leader may not be a member, so nothing is compared."""
    try:
        return tuple(range(group.size()))
    except Exception:
        return ()


# ---------------------------------------------------------------------------------------------
# Process-wide switch

_active: Tracer | None = None
_active_lock = threading.Lock()


def active() -> Tracer | None:
    return _active


class _Forward:
    """The hook's sink. While a tracer is active its bound methods are installed as this object's
    attributes, so the hook reaches the tracer without an extra Python call per collective; once
    tracing stopped they do nothing."""

    def __init__(self) -> None:
        self.clear()

    def route(self, tracer: Tracer) -> None:
        self.begin: Callable[..., CollectiveEvent | None] = tracer.begin
        self.attach: Callable[[object, Any], None] = tracer.attach
        self.waited: Callable[[Any, bool], None] = tracer.waited

    def clear(self) -> None:
        self.begin = _nothing
        self.attach = _nothing
        self.waited = _nothing


def _nothing(*args: Any) -> None:
    return None


_FORWARD = _Forward()


def start(config: TraceConfig) -> Tracer | None:
    """Start tracing in this process (torch.distributed must be initialized); idempotent."""
    global _active
    import torch.distributed as dist

    with _active_lock:
        if _active is not None:
            return _active
        if not dist.is_available() or not dist.is_initialized():
            return None
        tracer = Tracer(config, dist.get_rank(), dist.get_world_size())
        tracer.start()
        _active = tracer
        atexit.register(stop)
        return tracer


def stop() -> None:
    """Stop tracing (called at exit and before the process group is destroyed)."""
    global _active
    with _active_lock:
        tracer, _active = _active, None
        _FORWARD.clear()
    if tracer is not None:
        tracer.stop()


def with_overrides(config: TraceConfig, **changes: Any) -> TraceConfig:
    return replace(config, **{key: value for key, value in changes.items() if value is not None})
