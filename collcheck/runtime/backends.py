"""Collectives called on a backend object directly, past the c10d operators.

The dispatcher hook sees what reaches the `c10d::*` operators. A third-party backend's Python
package can also call its backend object itself: torch_npu's replacement `torch.distributed.gather`
/ `gather_object` / `batch_isend_irecv`, and its own `reduce_scatter_tensor_uneven`,
`all_gather_into_tensor_uneven` and `all_to_all_vc`, call
`group._get_backend(torch.device("npu")).<method>(...)` (a pybind method straight into C++). Those
collectives never reach an operator.

So `Backend.register_backend` is wrapped as soon as `distributed_c10d` is imported (bootstrap.py),
and the creator of every backend registered through it is wrapped in turn: the first time it
returns a backend of a new class, that class's collective methods (`METHODS`, those the class has)
are wrapped. Built-in backends (gloo, NCCL) are not touched, and a call that C++ makes (the c10d
operators' kernels call the backend's C++ methods) never goes through these Python attributes, so
nothing is recorded twice.

Each call is one `coll` line, with the same fields as a c10d collective, in the sequence
`<backend>:<group>` (e.g. `hccl:0`; `hccl:0:p2p` for `batch_isend_irecv`'s sends and receives,
which are recorded one by one), since the dispatcher's own numbering of the group is kept apart
(record mode's native kernel counts it in C++). These events are verified and watched for stalls
like any other. Without an active tracer, the wrappers call straight through. No torch import here.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from collcheck.runtime.active import active_tracer

_WRAPPED = "__collcheck_backend__"


@dataclass(frozen=True)
class BackendMethod:
    """How to read one backend method's positional arguments (after `self`).

    `tensors` is the argument whose shapes must agree across ranks (as for the c10d operators:
    inputs of gathers, outputs of scatters, the full-size side of the uneven variants); `opts` the
    options object (its `reduceOp`, `rootRank`); `peer`/`tag` for sends and receives.
    """

    method: str
    op: str
    tensors: int | None = 0
    opts: int | None = None
    shapes: bool = True
    p2p: bool = False
    peer: int | None = None
    tag: int | None = None


METHODS: tuple[BackendMethod, ...] = (
    BackendMethod("allreduce", "all_reduce", 0, opts=1),
    BackendMethod("allreduce_coalesced", "all_reduce_coalesced", 0, opts=1),
    BackendMethod("broadcast", "broadcast", 0, opts=1),
    BackendMethod("reduce", "reduce", 0, opts=1),
    BackendMethod("allgather", "all_gather", 1),
    BackendMethod("_allgather_base", "all_gather_into_tensor", 1),
    BackendMethod("allgather_coalesced", "all_gather_coalesced", 1),
    BackendMethod("gather", "gather", 1, opts=2),
    BackendMethod("scatter", "scatter", 0, opts=2),
    BackendMethod("reduce_scatter", "reduce_scatter", 0, opts=2),
    BackendMethod("_reduce_scatter_base", "reduce_scatter_tensor", 0, opts=2),
    BackendMethod("alltoall", "all_to_all", 1, shapes=False),
    BackendMethod("alltoall_base", "all_to_all_single", 1, shapes=False),
    BackendMethod("barrier", "barrier", None),
    BackendMethod("send", "send", 0, p2p=True, peer=1, tag=2),
    BackendMethod("recv", "recv", 0, p2p=True, peer=1, tag=2),
    # torch_npu's ProcessGroupHCCL; the full-size tensor is the one compared (input of the
    # reduce-scatter, output of the gather), so uneven splits compare correctly.
    BackendMethod("reduce_scatter_tensor_uneven", "reduce_scatter_tensor_uneven", 1, opts=3),
    BackendMethod("all_gather_into_tensor_uneven", "all_gather_into_tensor_uneven", 0),
    BackendMethod("alltoallvc", "all_to_all_vc", 1, shapes=False),
    BackendMethod("batch_isend_irecv", "batch_isend_irecv", 1),  # one send/recv event per entry
)
_BATCH = "batch_isend_irecv"
_SENDS = ("isend", "send")
_SEND = BackendMethod("send", "send", p2p=True)
_RECV = BackendMethod("recv", "recv", p2p=True)


class _Depth(threading.local):
    """Per thread: a wrapped method calling another one (a batch posting its sends) is one call."""

    value = 0


_depth = _Depth()
_patched: set[type] = set()
_lock = threading.Lock()


def patch(c10d: ModuleType) -> bool:
    """Wrap `Backend.register_backend` of `distributed_c10d` (idempotent); False if absent."""
    backend = getattr(c10d, "Backend", None)
    register = getattr(backend, "register_backend", None)
    if backend is None or register is None or getattr(register, _WRAPPED, False):
        return False
    original = register.__func__ if hasattr(register, "__func__") else register

    @functools.wraps(original)
    def register_backend(cls: Any, name: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return original(cls, name, _creator(str(name), func), *args, **kwargs)

    setattr(register_backend, _WRAPPED, True)
    wrapped = classmethod(register_backend)
    backend.register_backend = wrapped
    return True


def patch_existing() -> int:
    """Wrap the classes of registered backends that already exist (a tracer started by `enable()`
    after `init_process_group`, when the creators ran unwrapped); returns how many methods."""
    dist = sys.modules.get("torch.distributed")
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    plugins = getattr(getattr(dist, "Backend", None), "_plugins", None)
    world = getattr(c10d, "_world", None)
    if not plugins or world is None:
        return 0
    count = 0
    for group, entry in list(world.pg_map.items()):
        name = str(entry[0]) if isinstance(entry, tuple) and entry else ""
        if name.upper() not in plugins:  # a built-in backend (gloo, nccl): left alone
            continue
        for device in getattr(group, "_device_types", ()):
            try:
                count += patch_class(type(group._get_backend(device)), name.lower())
            except Exception:  # no backend for that device
                continue
    return count


def _creator(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def create(*args: Any, **kwargs: Any) -> Any:
        made = func(*args, **kwargs)
        try:
            patch_class(type(made), name)
        except Exception as error:  # the backend works all the same, unrecorded
            sys.stderr.write(f"collcheck: {name} backend calls not traced: {type(error).__name__}: {error}\n")
        return made

    return create


def patch_class(cls: type, backend: str) -> int:
    """Wrap the collective methods `cls` has (once per class); returns how many."""
    with _lock:
        if cls in _patched:
            return 0
        _patched.add(cls)
        count = 0
        for method in METHODS:
            original = getattr(cls, method.method, None)
            if original is None or not callable(original) or getattr(original, _WRAPPED, False):
                continue
            setattr(cls, method.method, _wrap(original, method, backend))
            count += 1
        return count


def _wrap(function: Callable[..., Any], method: BackendMethod, backend: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = active_tracer()
        if tracer is None or _depth.value:
            return function(self, *args, **kwargs)
        events = _begin(tracer, backend, method, self, args)
        _depth.value += 1
        try:
            result = function(self, *args, **kwargs)
        except BaseException:
            _end(tracer, events, None, ok=False)
            raise
        finally:
            _depth.value -= 1
        _end(tracer, events, result, ok=True)
        return result

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _begin(
    tracer: Any, backend: str, method: BackendMethod, instance: Any, args: tuple[Any, ...]
) -> list[Any]:
    """The events of this call, written and issued to the monitor (never raises)."""
    try:
        if method.method == _BATCH:
            return _batch(tracer, backend, instance, args)
        tensors = _tensors(_at(args, method.tensors))
        opts = _at(args, method.opts)
        root = _at(args, method.peer) if method.p2p else getattr(opts, "rootRank", None)
        reduce = getattr(opts, "reduceOp", None)
        event = tracer.begin_backend(
            _spec(method),
            backend,
            instance,
            tensors,
            reduce,
            root,
            _at(args, method.tag) if method.p2p else None,
        )
        return [] if event is None else [event]
    except Exception as error:
        sys.stderr.write(
            f"collcheck: {backend}.{method.method} not recorded: {type(error).__name__}: {error}\n"
        )
        return []


def _batch(tracer: Any, backend: str, instance: Any, args: tuple[Any, ...]) -> list[Any]:
    """torch_npu's `batch_isend_irecv(op_type, tensors, remote_rank_list)`: one send or recv event
    per entry (peers are ranks in the group), paired with the peers' like any other."""
    kinds, tensors, peers = (_at(args, index) for index in range(3))
    events = []
    for kind, tensor, peer in zip(kinds or (), tensors or (), peers or (), strict=False):
        spec = _spec(_SEND if str(kind) in _SENDS else _RECV)
        event = tracer.begin_backend(spec, backend, instance, [tensor], None, int(peer), 0)
        if event is not None:
            events.append(event)
    return events


def _end(tracer: Any, events: list[Any], result: Any, ok: bool) -> None:
    """A returned Work completes the (single) event the way a c10d Work does; a batch's one Work
    covers several events, whose completions are then not observable; anything else (a call that
    returned after communicating) completes them at return."""
    try:
        work_type = getattr(sys.modules.get("torch._C._distributed_c10d"), "Work", None)
        is_work = ok and work_type is not None and isinstance(result, work_type)
        if is_work and len(events) == 1:
            tracer.attach(events[0], result)
            return
        for event in events:
            if is_work:
                tracer.unobserved(event)
            else:
                tracer.finished(event, ok)
    except Exception as error:
        sys.stderr.write(f"collcheck: completion not recorded: {error}\n")


def _at(args: tuple[Any, ...], index: int | None) -> Any:
    return args[index] if index is not None and 0 <= index < len(args) else None


def _tensors(value: Any) -> list[Any]:
    """Tensor, Tensor[] and Tensor[][] arguments as one flat list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _tensors(item)]
    return [value] if hasattr(value, "shape") else []


@functools.lru_cache(maxsize=64)
def _spec(method: BackendMethod) -> Any:
    from collcheck.runtime.hook import OpSpec

    return OpSpec(method.method, method.op, p2p=method.p2p, shapes=method.shapes)
