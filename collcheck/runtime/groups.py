"""Group creation, recorded and verified like a collective.

`new_group` (unless `use_local_synchronization`), `new_subgroups`, `new_subgroups_by_enumeration`
and `split_group` must be called by every rank of the parent group (the whole job for the first
three), in the same order: each rendezvouses through the store, and the group names come from a
counter every rank keeps. A rank that creates one group more (a module creating its group lazily on
first use) hangs inside the creation, or leaves every later group mismatched. The dispatcher hook
never sees any of this, so these functions are wrapped in `distributed_c10d` itself, as soon as it
is imported (bootstrap.py), before `torch.distributed` and `device_mesh` copy the names; so
`init_device_mesh`, which calls `new_group` / `split_group`, is covered too, attributed to the
user's `init_device_mesh` line.

Each outermost call is one `coll` event of the sequence `<parent group>:create` (op `new_group`,
..., `args` what was asked for, e.g. `ranks=[0, 1]`), issued to the monitor before the call and
completed when it returns: compared across ranks like a collective, watched for stalls like one.
Without an active tracer the wrappers call straight through. No torch import here.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from collcheck.runtime.active import active_tracer

CREATORS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")
CREATE_SUFFIX = ":create"  # the sequence of groups created from `<parent>`: `<parent>:create`
MAX_ARGS = 200  # characters of a request kept as text; longer ones are summarised with a checksum
_WRAPPED = "__collcheck_creator__"
# Where the names are copied to: patched there too when already imported (`enable` after import).
_COPIES = ("torch.distributed", "torch.distributed.device_mesh")


class _Depth(threading.local):
    """Per thread: `new_subgroups` calls `new_group`; only the outermost call is one event."""

    value = 0


_depth = _Depth()


def patch(c10d: ModuleType) -> int:
    """Wrap the creators of `distributed_c10d` (and the copies of their names already made);
    idempotent. Returns how many were wrapped now."""
    count = 0
    for name in CREATORS:
        original = getattr(c10d, name, None)
        if original is None or getattr(original, _WRAPPED, False):
            continue
        wrapped = _wrap(original, name)
        setattr(c10d, name, wrapped)
        count += 1
        for copy in _COPIES:
            module = sys.modules.get(copy)
            if module is not None and getattr(module, name, None) is original:
                setattr(module, name, wrapped)
    return count


def is_creation(group: str) -> bool:
    return CREATE_SUFFIX in group


def numbered(group: str, seq: int) -> str:
    """`group 0, #4`; `group 0, group creation #2` for the groups created from group 0."""
    parent, creation, _ = group.partition(CREATE_SUFFIX)
    return f"group {parent}, group creation #{seq}" if creation else f"group {group}, #{seq}"


def _wrap(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    try:
        signature: inspect.Signature | None = inspect.signature(function)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tracer = active_tracer()
        if tracer is None or _depth.value:
            return function(*args, **kwargs)
        event = _begin(tracer, name, signature, args, kwargs)
        _depth.value += 1
        try:
            result = function(*args, **kwargs)
        except BaseException:
            _end(tracer, event, ok=False)
            raise
        finally:
            _depth.value -= 1
        _end(tracer, event, ok=True)
        return result

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _begin(
    tracer: Any, name: str, signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The event of this creation, issued to the monitor; None when it cannot be told (never raises:
    the group is created all the same)."""
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments if signature is not None else {}
        parent, local, asked = request(name, bound)
        return tracer.begin_creation(name, parent, local, asked)
    except Exception as error:
        sys.stderr.write(f"collcheck: {name} not recorded: {type(error).__name__}: {error}\n")
        return None


def _end(tracer: Any, event: Any, ok: bool) -> None:
    if event is None:
        return
    try:
        tracer.end_creation(event, ok)
    except Exception as error:
        sys.stderr.write(f"collcheck: end of group creation not recorded: {error}\n")


def request(name: str, bound: dict[str, Any]) -> tuple[Any, tuple[int, ...] | None, str]:
    """(the parent group, None for the default one; the members when only they synchronise, else
    None; what was asked for, as text that every rank asking the same writes the same)."""
    if name == "new_group":
        ranks = bound.get("ranks")
        members = None if ranks is None else [int(rank) for rank in ranks]
        if members is not None and bound.get("sort_ranks", True):
            members.sort()
        local = bool(bound.get("use_local_synchronization", False)) and members is not None
        asked = "ranks=all" if members is None else f"ranks={_bounded(members)}"
        return None, tuple(members) if local and members is not None else None, asked
    if name == "new_subgroups":
        return bound.get("group"), None, f"group_size={bound.get('group_size')}"
    if name == "new_subgroups_by_enumeration":
        return None, None, f"ranks_per_subgroup_list={_bounded(bound.get('ranks_per_subgroup_list'))}"
    return bound.get("parent_pg"), None, f"split_ranks={_bounded(bound.get('split_ranks'))}"


def _bounded(value: Any) -> str:
    """`[0, 1]`; a list too long to show becomes its length and checksum (still compared exactly)."""
    try:
        plain = _plain(value)
    except (TypeError, ValueError):
        plain = value
    text = repr(plain)
    if len(text) <= MAX_ARGS:
        return text
    return (
        f"<{len(plain) if isinstance(plain, list) else '?'} entries, crc32 {zlib.crc32(text.encode()):08x}>"
    )


def _plain(value: Any) -> Any:
    """Nested lists of ints, whatever sequence types and int-like objects they came as."""
    if value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, (list, tuple, range)):
        return [_plain(item) for item in value]
    return int(value)
