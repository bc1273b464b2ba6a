"""Every process of a job `collcheck run` started, found through /proc, and how to end them all.

torchrun starts each worker in its own session, so signalling the launcher's process group
misses the workers; and a launcher killed before it could stop its workers leaves them running.
`collcheck run` therefore makes itself a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`):
processes of the job whose parent dies are re-parented to it instead of to init, so "the job" is
always every descendant of `collcheck run`, found by walking /proc's parent links. Linux only;
elsewhere the job is its first process's group, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.05


def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def parent_death_signal(sig: signal.Signals) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive `sig` when this process dies, however it dies
    (Linux `PR_SET_PDEATHSIG`): a SIGKILL of `collcheck run` cannot be handled, and without this
    it left the launcher and every worker running. None where unsupported, or off the main
    thread (the signal comes when the forking *thread* ends)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between the fork and the prctl
            os.kill(os.getpid(), sig)

    return arm


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # the command name may hold spaces and parens
    return int(fields[1]), fields[0].decode()


def _all_processes() -> dict[int, tuple[int, str]]:
    found = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                info = _stat(int(name))
                if info is not None:
                    found[int(name)] = info
    return found


def descendants(root: int | None = None) -> dict[int, str]:
    """Every process below `root` (default: this one), pid -> state letter ("Z": a zombie)."""
    top = os.getpid() if root is None else root
    table = _all_processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, str] = {}
    stack = list(children.get(top, ()))
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found[pid] = table[pid][1]
        stack.extend(children.get(pid, ()))
    return found


def reap(keep: Iterable[int] = ()) -> None:
    """Collect exited children (orphans re-parented here), except `keep` (Popen's own child,
    whose status Popen must read itself)."""
    kept = set(keep)
    for pid, state in descendants().items():
        if state == "Z" and pid not in kept:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def alive(keep: Iterable[int] = ()) -> list[int]:
    """The descendants still running (zombies reaped first)."""
    reap(keep)
    return [pid for pid, state in descendants().items() if state != "Z"]


def end_all(
    first: signal.Signals, grace_s: float, leader: int | None = None, kill_wait_s: float = 5.0
) -> list[int]:
    """Signal every process of the job with `first`, then SIGTERM, then SIGKILL, each after
    `grace_s` (SIGKILL after at most `kill_wait_s` more); new descendants are found at each step.
    `leader`: the job's first process, signalled as a group too where /proc is missing. Returns
    the pids still alive at the end (none, unless a process is stuck in the kernel)."""
    steps: list[signal.Signals] = [first] if first == signal.SIGTERM else [first, signal.SIGTERM]
    steps.append(signal.SIGKILL)
    keep = () if leader is None else (leader,)
    for sig in steps:
        pids = alive(keep)
        if not pids and leader is not None and not os.path.isdir("/proc"):
            with contextlib.suppress(OSError):
                os.killpg(leader, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (kill_wait_s if sig == signal.SIGKILL else grace_s)
        while time.monotonic() < deadline:
            if not alive(keep):
                return []
            time.sleep(POLL_S)
    return alive(keep)
