"""How each worker process ended, as its launcher saw it.

A rank killed with SIGKILL cannot say so: only its parent learns the signal. Under `torchrun` the
parent is the elastic agent, which is itself a Python process that `collcheck run` starts with the
boot directory on PYTHONPATH. bootstrap.py patches the agent's `ProcessFailure` (one is made for
every worker that failed: its pid, local rank and exit code, negative for a signal) to append a
line `pid exitcode local_rank` to `collcheck-exits.txt` in the trace directory. `collcheck run`
maps pids to ranks through the trace headers. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
from types import ModuleType
from typing import Any

EXITS_FILE = "collcheck-exits.txt"
ELASTIC_MODULE = "torch.distributed.elastic.multiprocessing.api"
ENV_DIR = "COLLCHECK_TRACE_DIR"  # tracer.ENV_DIR, not imported: that module imports torch
_WRAPPED = "__collcheck_exits__"


def patch_elastic(module: ModuleType) -> None:
    """Record every worker failure torchrun's agent sees (idempotent; never fatal)."""
    failure = getattr(module, "ProcessFailure", None)
    original = getattr(failure, "__post_init__", None)
    if failure is None or original is None or getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def post_init(self: Any) -> None:
        original(self)
        with contextlib.suppress(Exception):  # a debugging aid must never break the launcher
            record(os.environ.get(ENV_DIR, ""), int(self.pid), int(self.exitcode), int(self.local_rank))

    setattr(post_init, _WRAPPED, True)
    failure.__post_init__ = post_init


def record(trace_dir: str, pid: int, exitcode: int, local_rank: int) -> None:
    if not trace_dir:
        return
    os.makedirs(trace_dir, exist_ok=True)
    line = f"{pid} {exitcode} {local_rank}\n".encode()
    # Appended to, not replaced (several agents add lines), so never through a planted link nor
    # into a FIFO: O_NOFOLLOW, O_NONBLOCK and a regular-file check on the descriptor.
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
    descriptor = os.open(os.path.join(trace_dir, EXITS_FILE), flags, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return
        os.write(descriptor, line)  # one short append: lines from several agents never interleave
    finally:
        os.close(descriptor)


def read(trace_dir: str) -> dict[int, int]:
    """pid -> exit code (negative: the signal), for every failed worker recorded; {} when none."""
    found: dict[int, int] = {}
    path = os.path.join(trace_dir, EXITS_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle.read(1 << 20).splitlines():
                parts = line.split()
                with contextlib.suppress(ValueError, IndexError):
                    found[int(parts[0])] = int(parts[1])
    except OSError:
        return {}
    return found


def clear(trace_dir: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(os.path.join(trace_dir, EXITS_FILE))


def loaded_elastic() -> None:
    """Patch the agent's module now if it is already imported (the finder covers later imports)."""
    module = sys.modules.get(ELASTIC_MODULE)
    if module is not None:
        patch_elastic(module)
