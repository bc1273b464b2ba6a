"""Intercept every collective at the c10d dispatcher.

`torch.distributed.all_reduce`, DDP's C++ reducer, FSDP2, functional collectives and compiled code
all end in the `c10d::*` operators (ProcessGroup's C++ methods call them through the dispatcher).
A Python kernel registered for those operators at the BackendSelect key runs before the backend's
own kernel, whatever the device (CPU/gloo, CUDA/NCCL, PrivateUse1/HCCL), and redispatches to the
keys below BackendSelect, so the real collective runs unchanged.

If the dispatcher registration is refused (an unusual torch build), `install` falls back to wrapping
the `torch.distributed` Python functions, which sees only collectives issued from Python.

With the dispatcher hook, `Work.wait` is wrapped too, so that record mode can note a collective's
completion on the thread that waits for it instead of in a callback on the backend's thread.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Protocol

from collcheck.runtime.operand import operand_at
from collcheck.runtime.record import PACKAGE_FOLDERS, CallSite

log = logging.getLogger("collcheck.runtime")


@dataclass(frozen=True)
class OpSpec:
    """How to read one c10d operator's arguments.

    `tensor_args` name the arguments whose shapes must agree across ranks (inputs for gathers,
    outputs for scatters), so the fingerprint is comparable between ranks.
    """

    name: str  # c10d operator, e.g. "allreduce_"
    label: str  # what users call it, e.g. "all_reduce"
    tensor_args: tuple[str, ...] = ()
    reduce_arg: str | None = None
    root_arg: str | None = None
    p2p: bool = False
    shapes: bool = True  # all_to_all may legitimately differ in shape (uneven splits)
    tag_arg: str | None = None  # send/recv: gloo pairs them by tag too, so it is compared


OP_SPECS: tuple[OpSpec, ...] = (
    OpSpec("allreduce_", "all_reduce", ("tensors",), "reduce_op"),
    OpSpec("allreduce_coalesced_", "all_reduce_coalesced", ("tensors",), "reduce_op"),
    OpSpec("broadcast_", "broadcast", ("tensors",), root_arg="root_rank"),
    OpSpec("reduce_", "reduce", ("tensors",), "reduce_op", "root_rank"),
    OpSpec("_allgather_base_", "all_gather_into_tensor", ("input_tensor",)),
    OpSpec("allgather_", "all_gather", ("input_tensors",)),
    OpSpec("allgather_coalesced_", "all_gather_coalesced", ("input_list",)),
    OpSpec("allgather_into_tensor_coalesced_", "all_gather_into_tensor_coalesced", ("inputs",)),
    OpSpec("_reduce_scatter_base_", "reduce_scatter_tensor", ("output_tensor",), "reduce_op"),
    OpSpec("reduce_scatter_", "reduce_scatter", ("output_tensors",), "reduce_op"),
    OpSpec("reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor_coalesced", ("outputs",), "reduce_op"),
    OpSpec("alltoall_", "all_to_all", ("input_tensors",), shapes=False),
    OpSpec("alltoall_base_", "all_to_all_single", ("input",), shapes=False),
    OpSpec("gather_", "gather", ("input_tensors",), root_arg="root_rank"),
    OpSpec("scatter_", "scatter", ("output_tensors",), root_arg="root_rank"),
    OpSpec("barrier", "barrier"),
    OpSpec("monitored_barrier_", "monitored_barrier"),
    OpSpec("send", "send", ("tensors",), root_arg="dst", p2p=True, tag_arg="tag"),
    OpSpec("recv_", "recv", ("tensors",), root_arg="src", p2p=True, tag_arg="tag"),
    OpSpec("recv_any_source_", "recv_any_source", ("tensors",), p2p=True, tag_arg="tag"),
)


class Sink(Protocol):
    """What the hook reports to (the Tracer)."""

    def begin(
        self,
        spec: OpSpec,
        group: Any,
        tensors: list[Any],
        reduce_op: int | None,
        root: int | None,
        tag: int | None = None,
    ) -> object | None: ...

    def attach(self, token: object, work: Any) -> None: ...

    def waited(self, work: Any, raised: bool) -> None: ...


@dataclass
class _Installed:
    library: Any
    mechanism: str
    restore: Callable[[], None] | None = None


_installed: _Installed | None = None
_install_lock = threading.Lock()


def install(sink: Sink, native: Any = None) -> str:
    """Register the interception once per process; returns "native", "dispatcher" or
    "python-fallback". `native` is the compiled recorder module (native_recorder.py), for record mode;
    asking for the other kind of kernel than the one registered replaces it."""
    global _installed
    with _install_lock:
        wanted = "native" if native is not None else "dispatcher"
        if _installed is not None and (
            _installed.mechanism == wanted or _installed.mechanism == "python-fallback"
        ):
            return _installed.mechanism
        if _installed is not None:
            _uninstall_locked()
        if native is not None:
            try:
                _installed = _install_native(native, sink)
                return _installed.mechanism
            except Exception as error:  # keep tracing with the Python kernel
                log.warning("collcheck: native kernels refused (%s); using the Python kernel", error)
        try:
            _installed = _install_dispatcher(sink)
        except Exception as error:  # registration refused: keep tracing what Python issues
            log.warning(
                "collcheck: dispatcher hook unavailable (%s); tracing torch.distributed calls only", error
            )
            _installed = _install_python_fallback(sink)
        return _installed.mechanism


def uninstall() -> None:
    with _install_lock:
        _uninstall_locked()


def _uninstall_locked() -> None:
    global _installed
    if _installed is None:
        return
    if _installed.library is not None:
        _installed.library._destroy()
    if _installed.restore is not None:
        _installed.restore()
    _installed = None


def _install_native(module: Any, sink: Sink) -> _Installed:
    """The C++ kernels of native/recorder.cpp for the collectives, given each operator's argument
    positions. Sends and recvs keep the Python kernel: gloo's complete only inside `wait()`, which
    the tracer watches from Python to tell a recv still waiting for its send from a finished one."""
    import torch

    operators = []
    for spec in OP_SPECS:
        packet = getattr(torch.ops.c10d, spec.name, None)
        if packet is None or spec.p2p:
            continue
        positions = _argument_positions(packet.default)
        operators.append(
            (
                spec.name,
                spec.label,
                positions["process_group"],
                [positions[name] for name in spec.tensor_args if name in positions],
                positions.get(spec.reduce_arg, -1) if spec.reduce_arg else -1,
                positions.get(spec.root_arg, -1) if spec.root_arg else -1,
                spec.shapes,
            )
        )
    if not operators:
        raise RuntimeError("no c10d operators found")
    python_kernels = _install_dispatcher(sink, [spec for spec in OP_SPECS if spec.p2p])
    try:
        module.install(operators)
    except Exception:
        python_kernels.library._destroy()
        if python_kernels.restore is not None:
            python_kernels.restore()
        raise
    restore_wait = python_kernels.restore

    def restore() -> None:
        module.uninstall()
        if restore_wait is not None:
            restore_wait()

    return _Installed(library=python_kernels.library, mechanism="native", restore=restore)


def _install_dispatcher(sink: Sink, specs: Sequence[OpSpec] = OP_SPECS) -> _Installed:
    import torch

    library: Any = torch.library.Library("c10d", "IMPL")  # type: ignore[no-untyped-call]
    below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    registered = 0
    for spec in specs:
        packet = getattr(torch.ops.c10d, spec.name, None)
        if packet is None:  # older/newer torch without this operator
            continue
        overload = packet.default
        library.impl(spec.name, _make_kernel(spec, overload, below, sink), "BackendSelect", with_keyset=True)
        registered += 1
    if registered == 0:
        raise RuntimeError("no c10d operators found")
    return _Installed(library=library, mechanism="dispatcher", restore=_wrap_work_wait(sink))


def _wrap_work_wait(sink: Sink) -> Callable[[], None] | None:
    """Report every return (or raise) of `Work.wait()` called from Python, such as the one inside
    every blocking `torch.distributed` collective. C++ waiters (DDP's reducer, `wait_tensor`) are not
    seen; record mode polls their works instead."""
    from torch._C import _distributed_c10d as c10d_c

    work_type: Any = c10d_c.Work
    original = work_type.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Runs after every blocking collective: one frame, the sink reached without a helper.
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            _report_wait(sink, self, raised=True)
            raise
        try:
            sink.waited(self, False)
        except Exception as error:  # the tracer must never break the program
            log.debug("collcheck: waited failed: %s", error)
        return result

    try:
        work_type.wait = functools.wraps(original)(wait)
    except (AttributeError, TypeError) as error:  # a binding that refuses new attributes: poll only
        log.debug("collcheck: Work.wait not wrapped: %s", error)
        return None

    def restore() -> None:
        work_type.wait = original

    return restore


def _report_wait(sink: Sink, work: Any, raised: bool) -> None:
    try:
        sink.waited(work, raised)
    except Exception as error:  # the tracer must never break the program
        log.debug("collcheck: waited failed: %s", error)


def _argument_positions(overload: Any) -> dict[str, int]:
    return {argument.name: index for index, argument in enumerate(overload._schema.arguments)}


def _make_kernel(spec: OpSpec, overload: Any, below: Any, sink: Sink) -> Callable[..., Any]:
    positions = _argument_positions(overload)
    group_at = positions["process_group"]
    tensor_at = tuple(positions[name] for name in spec.tensor_args if name in positions)
    tensors_of = _tensor_reader(tensor_at)
    reduce_at = positions.get(spec.reduce_arg, -1) if spec.reduce_arg else -1
    root_at = positions.get(spec.root_arg, -1) if spec.root_arg else -1
    tag_at = positions.get(spec.tag_arg, -1) if spec.tag_arg else -1
    # The handle's boxed redispatch, without OpOverload.redispatch's extra Python frame.
    handle = getattr(overload, "_handle", None)
    redispatch = getattr(handle, "redispatch_boxed", None) or overload.redispatch

    # Every collective pays for this frame: positions are resolved above, the dispatcher passes
    # every schema argument positionally, so the `len(args)` guards only protect odd callers.
    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        token = None
        try:
            count = len(args)
            token = sink.begin(
                spec,
                args[group_at],
                tensors_of(args),
                reduce_code(args[reduce_at]) if 0 <= reduce_at < count else None,
                args[root_at] if 0 <= root_at < count else None,
                args[tag_at] if 0 <= tag_at < count else None,
            )
        except Exception as error:  # the tracer must never break the program
            log.debug("collcheck: begin failed: %s", error)
        result = redispatch(keyset & below, *args, **kwargs)
        if token is not None:
            sink.attach(token, result[1] if isinstance(result, tuple) else result)
        return result

    return kernel


def _tensor_reader(tensor_at: tuple[int, ...]) -> Callable[[Sequence[Any]], list[Any]]:
    """How the kernel collects an operator's tensors. Most operators have one `Tensor[]` argument,
    whose list is passed on as it is (the tracer only reads it) instead of being copied."""
    if len(tensor_at) != 1:
        return lambda args: _flatten([args[i] for i in tensor_at if i < len(args)])
    (at,) = tensor_at

    def one(args: Sequence[Any]) -> list[Any]:
        value = args[at] if at < len(args) else None
        if type(value) is list and (not value or type(value[0]) is not list):
            return value
        return _flatten([value])

    return one


def _flatten(values: Sequence[Any]) -> list[Any]:
    """Tensor, Tensor[] and Tensor[][] arguments, as one flat list of tensors."""
    flat: list[Any] = []
    for value in values:
        if isinstance(value, (list, tuple)):
            flat.extend(_flatten(value))
        elif value is not None:
            flat.append(value)
    return flat


def reduce_code(value: Any) -> int | None:
    """c10d passes the ReduceOp as a TorchScript object whose `op()` is the RedOpType number."""
    try:
        return int(value.op())
    except Exception:
        try:
            return int(value)
        except Exception:
            return None


def _install_python_fallback(sink: Sink) -> _Installed:
    """Wrap the torch.distributed functions; misses C++ callers (DDP reducer, compiled code)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    names = {
        "all_reduce": "allreduce_",
        "broadcast": "broadcast_",
        "barrier": "barrier",
        "all_gather_into_tensor": "_allgather_base_",
        "reduce_scatter_tensor": "_reduce_scatter_base_",
        "all_gather": "allgather_",
        "reduce": "reduce_",
    }
    by_name = {spec.name: spec for spec in OP_SPECS}
    originals: dict[str, Any] = {}
    for public, c10d_name in names.items():
        original = getattr(c10d, public)
        originals[public] = original
        wrapped = _python_wrapper(by_name[c10d_name], original, sink)
        setattr(c10d, public, wrapped)
        setattr(dist, public, wrapped)

    def restore() -> None:
        for public, original in originals.items():
            setattr(c10d, public, original)
            setattr(dist, public, original)

    return _Installed(library=None, mechanism="python-fallback", restore=restore)


def _python_wrapper(spec: OpSpec, original: Callable[..., Any], sink: Sink) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import torch.distributed as dist

        group = kwargs.get("group") or dist.group.WORLD
        tensors = [a for a in args if hasattr(a, "shape")]
        token = None
        try:
            token = sink.begin(spec, group, tensors, None, None)
        except Exception as error:
            log.debug("collcheck: begin failed: %s", error)
        result = original(*args, **kwargs)
        if token is not None:
            sink.attach(token, None)
        return result

    return wrapper


# ---------------------------------------------------------------------------------------------
# Call sites


class Tier(enum.IntEnum):
    """How likely a frame is to be where the collective was issued, best first. The site is the
    innermost frame of the best tier present; only USER frames are the user's own code."""

    USER = 0
    PACKAGE = 1  # an installed package (site-packages, dist-packages): accelerate's data loader
    WRAPPER = 2  # the standard library's and typing_extensions' wrappers, device backends' packages
    TORCH = 3  # torch itself and generated code (`<eval_with_key>` of FX graphs, `<frozen ...>`)
    NEVER = 4  # collcheck: never a call site, not even of library code


# Installed packages' frames are PACKAGE even when their folder lies inside the standard library's
# (a system Python's /usr/lib/python3/dist-packages).
_PACKAGE_FOLDER = re.compile("|".join(re.escape(os.sep + folder + os.sep) for folder in PACKAGE_FOLDERS))


@dataclass(frozen=True)
class _Prefixes:
    never: tuple[str, ...]
    torch: tuple[str, ...]
    wrapper: tuple[str, ...]  # checked before PACKAGE_FOLDERS: typing_extensions is installed too
    stdlib: tuple[str, ...]  # checked after: a system Python's dist-packages lies inside it


def _prefixes() -> _Prefixes:
    """Where frames of each tier but USER and PACKAGE live: collcheck; torch and generated code;
    the standard library (functools, contextlib wrappers), typing_extensions' @deprecated wrapper and
    the device backends' packages."""
    import sysconfig

    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    collcheck = os.path.dirname(here)
    stdlib = {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib")}
    wrappers = []
    typing_extensions = sys.modules.get("typing_extensions")
    if typing_extensions is not None and getattr(typing_extensions, "__file__", None):
        wrappers.append(os.path.abspath(str(typing_extensions.__file__)))
    return _Prefixes(
        never=(collcheck + os.sep,),
        torch=(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, "<"),
        wrapper=(*wrappers, *_backend_packages()),
        stdlib=tuple(path + os.sep for path in stdlib),
    )


# Device backends' Python packages: their wrappers of torch.distributed (torch_npu's `gather`,
# `reduce_scatter_tensor_uneven`, ...) are not where the user issued the collective.
BACKEND_PACKAGES = ("torch_npu",)


def _backend_packages() -> list[str]:
    """The folders of the BACKEND_PACKAGES found on sys.path (found, not imported)."""
    import importlib.util

    found = []
    for name in BACKEND_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            found.append(os.path.abspath(folder) + os.sep)
    return found


_PREFIXES: _Prefixes | None = None
STACK_DEPTH = 4  # native/recorder.cpp's kStackDepth


def file_tier(filename: str) -> Tier:
    """The tier of frames of this file (see `Tier`)."""
    global _PREFIXES
    if _PREFIXES is None:
        _PREFIXES = _prefixes()
    if filename.startswith(_PREFIXES.never):
        return Tier.NEVER
    if filename.startswith(_PREFIXES.torch):
        return Tier.TORCH
    if filename.startswith(_PREFIXES.wrapper):
        return Tier.WRAPPER
    if _PACKAGE_FOLDER.search(filename):
        return Tier.PACKAGE
    if filename.startswith(_PREFIXES.stdlib):
        return Tier.WRAPPER
    return Tier.USER


def skipped_file(filename: str) -> bool:
    """Whether frames of this file are never the user's call site (see `Tier`)."""
    return file_tier(filename) is not Tier.USER


# Caches for the walk, keyed by id(code) because code objects compare by content, not by file; each
# entry holds its code objects, so an id cannot be reused while it is cached. One tier per code
# object, one CallSite per distinct (code, line) chain. Both are bounded (cleared when full), so
# programs that generate code cannot grow them without limit.
_CACHE_LIMIT = 1 << 16
_code_tiers: dict[int, tuple[CodeType, Tier]] = {}
_sites: dict[tuple[object, ...], tuple[list[CodeType], CallSite]] = {}  # by f_lasti chain
_sites_by_line: dict[tuple[object, ...], tuple[list[CodeType], CallSite]] = {}  # one CallSite per line chain


def call_site(main_thread_ident: int | None = None) -> CallSite:
    """The first frame outside torch and collcheck, with a short stack of user frames.

    Collectives issued from a thread with no user frame (DDP's autograd-engine hooks) are attributed
    to what the main thread is running (typically `loss.backward()`), marked `via="main-thread"`.
    Where neither thread runs user code (a script installed in site-packages calling a library),
    the site is the innermost frame of the best tier below USER, marked `library`: an installed
    package's frame, else a standard-library wrapper's, else torch's own.
    """
    frame = sys._getframe(1)
    site = _site_from(frame, Tier.USER, "")
    if site is not None:
        return site
    main = None
    if main_thread_ident is not None and main_thread_ident != threading.get_ident():
        main = sys._current_frames().get(main_thread_ident)
        site = _site_from(main, Tier.USER, "main-thread") if main is not None else None
        if site is not None:
            return site
    for start, via in ((frame, ""), (main, "main-thread")):
        for tier in (Tier.PACKAGE, Tier.WRAPPER, Tier.TORCH):
            site = _site_from(start, tier, via) if start is not None else None
            if site is not None:
                return site
    return CallSite()


def _tier(code: CodeType) -> Tier:
    known = _code_tiers.get(id(code))
    if known is None:
        known = _remember(_code_tiers, id(code), (code, file_tier(code.co_filename)))
    return known[1]


def _site_from(frame: FrameType | None, tier: Tier, via: str) -> CallSite | None:
    """The site of the innermost frame of at most `tier`, with the stack of such frames. Walks
    `f_back` only; the CallSite (and its encoded JSON) is built once per chain. The chain is keyed
    by each frame's `f_lasti` (an attribute read) rather than `f_lineno` (computed from the line
    table on every read); line numbers are computed only when a new chain is built."""
    start = frame
    key: list[object] = [via, tier]
    codes: list[CodeType] = []
    lasti = -1  # the innermost kept frame's instruction: its call's operand is the site's
    while frame is not None and len(codes) < STACK_DEPTH:
        code = frame.f_code
        if _tier(code) <= tier:
            codes.append(code)
            key += (id(code), frame.f_lasti)
            if lasti < 0:
                lasti = frame.f_lasti
        frame = frame.f_back
    if not codes:
        return None
    chain = tuple(key)
    cached = _sites.get(chain)
    if cached is None:
        lines = _kept_lines(start, tier, len(codes))
        site = _site_for_lines(codes, lines, via, operand_at(codes[0], lasti), tier is not Tier.USER)
        cached = _remember(_sites, chain, (codes, site))
    return cached[1]


def _site_for_lines(
    codes: list[CodeType], lines: tuple[int, ...], via: str, operand: str = "", library: bool = False
) -> CallSite:
    """One CallSite per chain of lines and operand, shared by the instruction chains on them (two
    calls of one operand on one line), so each stack is encoded once."""
    key = (via, operand, library, *(id(code) for code in codes), *lines)
    known = _sites_by_line.get(key)
    if known is None:
        known = _remember(_sites_by_line, key, (codes, _build_site(codes, lines, via, operand, library)))
    return known[1]


def _kept_lines(frame: FrameType | None, tier: Tier, count: int) -> tuple[int, ...]:
    """The line numbers of the frames `_site_from` kept (the first `count` of at most `tier`)."""
    lines: list[int] = []
    while frame is not None and len(lines) < count:
        if _tier(frame.f_code) <= tier:
            lines.append(frame.f_lineno)
        frame = frame.f_back
    return tuple(lines)


def _build_site(
    codes: list[CodeType], lines: tuple[int, ...], via: str, operand: str = "", library: bool = False
) -> CallSite:
    frames = zip(codes, lines, strict=True)
    stack = tuple(f"{code.co_filename}:{line} in {code.co_name}" for code, line in frames)
    first = codes[0]
    return CallSite(
        first.co_filename, lines[0], first.co_name, stack, via=via, operand=operand, library=library
    )


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value
