"""Adapters for communicators that bypass c10d: vLLM's PyNccl and vllm-ascend's PyHccl.

These classes call libnccl / libhccl through ctypes, so their collectives never reach the c10d
dispatcher that `hook.py` intercepts. This module wraps their methods instead, once the module that
defines them is imported (or at once, when it already is), and turns each call into the same `coll`
event a c10d collective gives, fed to the same writer and the same cross-rank monitor.

What to wrap is data (`ADAPTERS`): a module, a class, how to read the communicator's rank, size and
underlying group from an instance, and per method which argument carries the tensor, the root and
the reduce op. `register` adds a communicator of your own. Nothing here imports torch or vLLM: the
wrappers look up the active tracer when called and call straight through when there is none.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from collcheck.runtime.active import active_tracer
from collcheck.runtime.importhook import PatchingLoader

ENV_ADAPTERS = "COLLCHECK_ADAPTERS"  # "0": leave these communicators alone
_WRAPPED = "__collcheck_adapter__"
# RedOpType numbering of c10d, as in tracer.REDUCE_NAMES (not imported: that module imports torch's
# side of collcheck, and this one must stay importable from sitecustomize).
_REDUCE_NAMES = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")


@dataclass(frozen=True)
class MethodSpec:
    """How to read one communicator method's arguments.

    `tensor` names the parameter whose shape must agree on every rank, trying each name in turn
    (releases renamed some). For gathers it is the full-size output and for reduce-scatters the
    full-size input, so the uneven `*v` variants, whose per-rank side differs, compare as well.
    `root` is a rank inside the communicator (the peer for send/recv); it is recorded as a global
    rank when the communicator's members are known.
    """

    method: str
    op: str  # the label in events, as for c10d ("all_reduce", "broadcast", ...)
    tensor: tuple[str, ...] = ()
    reduce: str | None = None
    root: str | None = None
    p2p: bool = False
    shapes: bool = True  # False: compare dtypes only (scatter, all_to_all: shapes may differ)


@dataclass(frozen=True)
class AdapterSpec:
    """One communicator class, by import path, and how to identify its group from an instance.

    `group_attr` is the c10d ProcessGroup the communicator was built over: its name keys the
    events' group (`<prefix>:<c10d name>`, so it is the same on every rank) and its members are
    the global ranks. A communicator over anything else (vLLM's StatelessProcessGroup) has unknown
    global ranks: it is recorded, but not cross-checked. While `disabled_attr` is true the methods
    return without communicating, so nothing is recorded.
    """

    module: str
    cls: str
    prefix: str
    methods: tuple[MethodSpec, ...]
    rank_attr: str = "rank"
    world_attr: str = "world_size"
    group_attr: str = "group"
    disabled_attr: str | None = "disabled"


# Method names and parameter names of vLLM's pynccl.py and vllm-ascend's pyhccl.py across releases
# (e.g. all_reduce(tensor, op, stream) before all_reduce(in_tensor, out_tensor, op, stream)); a method
# a release does not have is skipped, and positions are read from the real signature when wrapping.
COMMUNICATOR_METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("all_reduce", "all_reduce", ("in_tensor", "tensor"), reduce="op"),
    MethodSpec("all_gather", "all_gather_into_tensor", ("output_tensor",)),
    MethodSpec("all_gatherv", "all_gatherv", ("output_tensor",)),
    MethodSpec("reduce_scatter", "reduce_scatter_tensor", ("input_tensor",), reduce="op"),
    MethodSpec("reduce_scatterv", "reduce_scatterv", ("input_tensor",), reduce="op"),
    MethodSpec("reduce", "reduce", ("input_tensor",), reduce="op", root="root"),
    MethodSpec("scatter", "scatter", ("output_tensor",), root="root", shapes=False),
    MethodSpec("broadcast", "broadcast", ("tensor",), root="src"),
    MethodSpec("all_to_all_single", "all_to_all_single", ("input_", "input"), shapes=False),
    MethodSpec("send", "send", ("tensor",), root="dst", p2p=True),
    MethodSpec("recv", "recv", ("tensor",), root="src", p2p=True),
)

ADAPTERS: list[AdapterSpec] = [
    AdapterSpec(
        "vllm.distributed.device_communicators.pynccl", "PyNcclCommunicator", "pynccl", COMMUNICATOR_METHODS
    ),
    AdapterSpec(
        "vllm_ascend.distributed.device_communicators.pyhccl",
        "PyHcclCommunicator",
        "pyhccl",
        COMMUNICATOR_METHODS,
    ),
]


# ---------------------------------------------------------------------------------------------
# Installing: patch what is imported, and what gets imported later


_lock = threading.RLock()
_ABSENT = object()  # the class inherited the method: uninstall deletes the wrapper again
_originals: list[tuple[type, str, Any]] = []  # (class, method, what the class had) for uninstall


def install() -> None:
    """Wrap every registered communicator now (if its module is imported) or when it is (idempotent)."""
    with _lock:
        for spec in ADAPTERS:
            module = sys.modules.get(spec.module)
            if module is not None:
                patch_module(module)
        if not any(isinstance(finder, _AdapterFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _AdapterFinder())


def register(spec: AdapterSpec) -> None:
    """Add a communicator class of your own; takes effect at once if `install` already ran."""
    with _lock:
        ADAPTERS.append(spec)
        module = sys.modules.get(spec.module)
        if module is not None and any(isinstance(f, _AdapterFinder) for f in sys.meta_path):
            patch_module(module)


def uninstall() -> None:
    """Restore the original methods and stop watching imports (tests)."""
    with _lock:
        for cls, name, original in reversed(_originals):
            if original is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, original)
        _originals.clear()
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AdapterFinder)]


def patch_module(module: ModuleType) -> int:
    """Wrap the registered classes of an imported module; returns how many methods were wrapped."""
    count = 0
    with _lock:
        for spec in ADAPTERS:
            if spec.module != module.__name__:
                continue
            cls = getattr(module, spec.cls, None)
            if isinstance(cls, type):
                count += _patch_class(cls, spec)
    return count


def _patch_class(cls: type, spec: AdapterSpec) -> int:
    count = 0
    for method in spec.methods:
        original = inspect.getattr_static(cls, method.method, None)
        # Plain functions only: a staticmethod or property is not a communicator call we understand.
        if not inspect.isfunction(original) or getattr(original, _WRAPPED, False):
            continue
        _originals.append((cls, method.method, cls.__dict__.get(method.method, _ABSENT)))
        # Set on the class itself: every reference to it (`from ... import PyNcclCommunicator`) and
        # every instance sees the wrapper, and subclasses inherit it.
        setattr(cls, method.method, _wrap(original, spec, method))
        count += 1
    return count


class _AdapterFinder(importlib.abc.MetaPathFinder):
    """Finds a watched module the way the rest of sys.meta_path would (editable installs have
    their own finders), then wraps its loader so the classes are patched right after the module
    body ran, before anyone can instantiate them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(spec.module == fullname for spec in ADAPTERS):
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _AdapterFinder):
                continue
            find = getattr(finder, "find_spec", None)
            found = find(fullname, path, target) if find is not None else None
            if found is None:
                continue
            if found.loader is None or not hasattr(found.loader, "exec_module"):
                return None  # let the normal import run; `install` patches it if called again
            found.loader = PatchingLoader(found.loader, _patch_after_import)
            spec: importlib.machinery.ModuleSpec = found
            return spec
        return None


def _patch_after_import(module: ModuleType) -> None:
    try:
        patch_module(module)
    except Exception as error:  # tracing is a debugging aid: never fail the import for it
        sys.stderr.write(f"collcheck: adapter not installed: {type(error).__name__}: {error}\n")


# ---------------------------------------------------------------------------------------------
# The wrapper


@dataclass(frozen=True)
class _Param:
    """Where a parameter is in a call: its index in *args (self is 0; -1 if keyword-only)."""

    name: str
    index: int
    default: Any


@dataclass(frozen=True)
class _Layout:
    tensor: _Param | None
    reduce: _Param | None
    root: _Param | None


def _layout(function: Callable[..., Any], method: MethodSpec) -> _Layout:
    """Read once, at wrapping time, from the real signature: calls then only index their args."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return _Layout(None, None, None)
    found: dict[str, _Param] = {}
    for index, parameter in enumerate(parameters):
        positional = parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        default = None if parameter.default is parameter.empty else parameter.default
        found[parameter.name] = _Param(parameter.name, index if positional else -1, default)
    tensor = next((found[name] for name in method.tensor if name in found), None)
    return _Layout(
        tensor,
        found.get(method.reduce) if method.reduce else None,
        found.get(method.root) if method.root else None,
    )


def _value(param: _Param | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if param is None:
        return None
    if 0 <= param.index < len(args):
        return args[param.index]
    return kwargs.get(param.name, param.default)


class _Depth(threading.local):
    """Per thread: inside a wrapped call, nested wrapped calls (an all_gatherv that broadcasts per
    rank through `self.broadcast`) are part of the outer collective and not recorded again."""

    value = 0


_depth = _Depth()


def _wrap(function: Callable[..., Any], spec: AdapterSpec, method: MethodSpec) -> Callable[..., Any]:
    layout = _layout(function, method)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tracer = active_tracer()
        if tracer is None or _depth.value:
            return function(*args, **kwargs)
        pending = _begin(tracer, spec, method, layout, args, kwargs)
        _depth.value += 1
        try:
            result = function(*args, **kwargs)
        except BaseException:
            _end(tracer, pending, ok=False)
            raise  # the same exception object, with its traceback
        finally:
            _depth.value -= 1
        _end(tracer, pending, ok=True)
        return result  # the same object the communicator returned

    setattr(wrapper, _WRAPPED, True)
    return wrapper


# ---------------------------------------------------------------------------------------------
# Events: the same CollectiveEvent, writer, encoder and monitor as the c10d hook


@dataclass(frozen=True)
class _Pending:
    event: Any  # CollectiveEvent (record.py is imported lazily, with torch already loaded)
    host: bool  # every tensor is on the CPU


@dataclass(frozen=True)
class _Identity:
    """Who a communicator instance is, worked out on its first recorded call."""

    name: str  # "pynccl:<c10d group name>", ".<n>" for the n-th communicator over that group
    ranks: tuple[int, ...]  # global ranks of its members, in its own rank order; () when unknown
    desc: str


_identities: weakref.WeakKeyDictionary[Any, _Identity] = weakref.WeakKeyDictionary()
_identities_by_id: dict[int, _Identity] = {}  # instances that cannot be weakly referenced
_instances_per_key: dict[str, int] = {}
_seq: dict[str, int] = {}
_seq_owner: list[Any] = [None]  # the tracer the counters belong to: a new tracer starts from 1


def _begin(
    tracer: Any,
    spec: AdapterSpec,
    method: MethodSpec,
    layout: _Layout,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> _Pending | None:
    """Write the `coll` line and hand the event to the monitor; None when nothing is recorded.

    Never raises: whatever goes wrong here, the communicator is still called.
    """
    try:
        instance = args[0] if args else None
        if instance is None or (spec.disabled_attr and getattr(instance, spec.disabled_attr, False)):
            return None
        tensors = _tensors(_value(layout.tensor, args, kwargs))
        if any(_is_fake(t) for t in tensors):  # tracing/compiling, not a real collective
            return None
        event = _record(tracer, method, _identity(instance, spec, tracer.rank), tensors, args, kwargs, layout)
        return _Pending(event, all(_on_host(t) for t in tensors))
    except Exception as error:
        sys.stderr.write(f"collcheck: {spec.prefix}.{method.method} not recorded: {error}\n")
        return None


def _record(
    tracer: Any,
    method: MethodSpec,
    identity: _Identity,
    tensors: list[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    layout: _Layout,
) -> Any:
    from collcheck.runtime.hook import call_site
    from collcheck.runtime.record import CollectiveEvent

    root = _to_global(_value(layout.root, args, kwargs), identity.ranks)
    name = f"{identity.name}:p2p" if method.p2p else identity.name
    ranks = _members(method, identity, tracer.rank, root)
    event = CollectiveEvent(
        rank=tracer.rank,
        group=name,
        group_ranks=ranks,
        seq=_next_seq(tracer, name),
        op=method.op,
        shapes=tuple(tuple(t.shape) for t in tensors) if method.shapes else (),
        dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in tensors),
        reduce_op=_reduce_name(_value(layout.reduce, args, kwargs)) if method.reduce else None,
        root=root,
        site=call_site(threading.main_thread().ident),
        thread=threading.current_thread().name,
        t_start=time.time(),
        group_desc=identity.desc,
    )
    tracer.writer.write_coll(*tracer.encoder.coll(event))
    # Cross-checked like a c10d collective when the members are known (the leader is the lowest
    # global rank; a send is paired with its peer's recv, as for c10d).
    if identity.ranks:
        if method.p2p:
            tracer.monitor.issued_p2p(event)
        else:
            tracer.monitor.issued(event)
    return event


def _members(method: MethodSpec, identity: _Identity, rank: int, root: int | None) -> tuple[int, ...]:
    """Global ranks taking part: the group's, or for send/recv this rank and its peer."""
    if not method.p2p:
        return identity.ranks
    return tuple(sorted({rank, root})) if root is not None and identity.ranks else ()


def _end(tracer: Any, pending: _Pending | None, ok: bool) -> None:
    """After the call. On host tensors its return is the completion (`done`). On device tensors the
    ctypes call only enqueued the collective on a stream, so completion is not observable
    (`unobserved`, as for a c10d Work without a future); a raised call is a failed one either way."""
    if pending is None:
        return
    event = pending.event
    try:
        if pending.host or not ok:
            tracer.writer.write_line(tracer.encoder.done(event.group, event.seq, time.time(), ok))
        else:
            tracer.writer.write({"ev": "unobserved", "group": event.group, "seq": event.seq})
        tracer.monitor.completed(event.group, event.seq)
        if not ok:  # often a peer that collcheck stopped: end with its report, not the library's error
            tracer.monitor.collective_failed()
    except Exception as error:
        sys.stderr.write(f"collcheck: completion not recorded: {error}\n")


def _next_seq(tracer: Any, group: str) -> int:
    with _lock:
        if _seq_owner[0] is not tracer:
            _seq.clear()
            _seq_owner[0] = tracer
        seq = _seq.get(group, 0) + 1
        _seq[group] = seq
        return seq


def _identity(instance: Any, spec: AdapterSpec, rank: int) -> _Identity:
    try:
        known = _identities.get(instance)
    except TypeError:  # unhashable or not weakly referenceable
        known = _identities_by_id.get(id(instance))
    if known is not None:
        return known
    with _lock:
        identity = _new_identity(instance, spec, rank)
        try:
            _identities[instance] = identity
        except TypeError:
            _identities_by_id[id(instance)] = identity
    return identity


def _new_identity(instance: Any, spec: AdapterSpec, rank: int) -> _Identity:
    group = getattr(instance, spec.group_attr, None)
    c10d = _c10d_group(group)
    if c10d is not None:
        group_name, ranks = c10d
        if not _consistent(instance, spec, ranks, rank):
            ranks = ()  # not the communicator's members after all: record, but do not guess a leader
        key = f"{spec.prefix}:{group_name}"
    else:
        ranks = ()
        key = f"{spec.prefix}:{type(group).__name__}"  # e.g. vLLM's StatelessProcessGroup
    # Instances over the same group are told apart by creation order, which every rank shares:
    # each communicator communicates (a warm-up all_reduce) while it is being constructed.
    count = _instances_per_key.get(key, 0) + 1
    _instances_per_key[key] = count
    name = key if count == 1 else f"{key}.{count}"
    return _Identity(name, ranks, spec.cls)


def _consistent(instance: Any, spec: AdapterSpec, ranks: tuple[int, ...], rank: int) -> bool:
    """The group's members agree with the communicator's own size and rank (this process)."""
    world = getattr(instance, spec.world_attr, None)
    local = getattr(instance, spec.rank_attr, None)
    if isinstance(world, int) and len(ranks) != world:
        return False
    return not isinstance(local, int) or (0 <= local < len(ranks) and ranks[local] == rank)


def _c10d_group(group: Any) -> tuple[str, tuple[int, ...]] | None:
    """(c10d name, global ranks) when `group` is a torch.distributed ProcessGroup."""
    if group is None:
        return None
    dist = sys.modules.get("torch.distributed")
    process_group = getattr(dist, "ProcessGroup", None) if dist is not None else None
    if process_group is None or not isinstance(group, process_group):
        return None
    try:
        ranks = dist.get_process_group_ranks(group)  # type: ignore[union-attr]
        return str(group.group_name), tuple(int(r) for r in ranks)
    except Exception:  # a group c10d does not know (built by hand): members unknown
        return str(getattr(group, "group_name", "?")), ()


def _tensors(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [item for item in value if hasattr(item, "shape")]
    return [value] if hasattr(value, "shape") else []


def _is_fake(tensor: Any) -> bool:
    return bool(getattr(tensor, "is_meta", False)) or hasattr(tensor, "fake_mode")


def _on_host(tensor: Any) -> bool:
    device = getattr(tensor, "device", None)
    return getattr(device, "type", "cpu") == "cpu"


def _to_global(local: Any, ranks: tuple[int, ...]) -> int | None:
    if local is None:
        return None
    try:
        index = int(local)
    except (TypeError, ValueError):
        return None
    return ranks[index] if 0 <= index < len(ranks) else index


def _reduce_name(value: Any) -> str | None:
    """torch's ReduceOp / RedOpType (what these communicators take), an int, or something named."""
    if value is None:
        return None
    code = _int_or_none(value)
    if code is None and hasattr(value, "op"):
        code = _int_or_none(_call(value.op))
    if code is not None:
        return _REDUCE_NAMES[code] if 0 <= code < len(_REDUCE_NAMES) else str(code)
    name = getattr(value, "name", None) or str(value)
    return str(name).rsplit(".", 1)[-1].lower()


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except Exception:
        return None


def _call(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:
        return None
