"""Files analysed in worker processes, under a parent that outlasts any one worker.

In: the files in the order to start them, the worker count, the job (one file in, its result
out, in a worker), the workers' initializer, and the longest a file may go without an answer
(`answer_limit`; None: no limit). Out: every file's result.

Why: the per-file safety clock (static/budget.py) is enforced inside the worker, which cannot stop
native code that ignores it (z3's destructor of a stopped file's context was seen looping
forever), and `pool.map` then waited for that file for ever; a worker killed from outside (the
kernel's out-of-memory killer) ended the whole run with `BrokenProcessPool`. Here:

* at most one file per worker is handed out at a time, so a file's clock starts when a worker
  takes it; a file with no answer past its limit is reported as stopped, the pool's workers are
  killed, and the files the other workers had are started again in a fresh pool;
* when a worker dies, every file in flight fails with it and none can be blamed: those files
  are run again one at a time, and a file whose worker dies while it is alone is reported;
* a pool whose workers stopped `RETIRE_AFTER_STOPS` files at their budget takes no more files and
  a fresh one goes on: each stopped file's z3 context is kept, never deleted (static/budget.py),
  about 16 MiB for the pathological file of the tests, and the workers' exit frees them;
* likewise a pool one of whose workers has grown past `RETIRE_ABOVE_BYTES` resident (Linux): a
  worker's memory is mostly the free space of the interpreter's arenas that a few live objects
  keep (measured on vllm: 31 MB of live blocks in 103 MB of arenas), which only its exit returns.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from collcheck.findings import FileError, FileResult

# Past a file's safety clock and the backstop's grace: the worker's start, reading the file, the cache.
ANSWER_MARGIN_S = 30.0
RETIRE_AFTER_STOPS = 8  # files stopped at their budget in one pool before its workers are replaced
# A worker this large (resident) between two files is replaced with its pool (the models and
# caches it kept are built again by the next one: a cost in time, never in answers). Measured
# 2026-12-05, cold -j 2 against the code without it: at 150 MB vllm's peak (process tree) was
# 402 MB instead of 623 MB for +5% CPU, but torch/distributed in the whole torch tree, whose
# workers reach 180-200 MB, paid +8-17% CPU (each of its files models dozens of helper files,
# built again by every fresh worker); at 200 MB torch/distributed costs nothing (19.9 s against
# 20.1 s CPU).
RETIRE_ABOVE_BYTES = 200 * 1024 * 1024


def answer_limit(file_timeout: float | None) -> float | None:
    """How long a worker may keep one file before the parent gives up on it (None: no budget)."""
    if not file_timeout:
        return None
    from collcheck.static.budget import BACKSTOP_GRACE_S

    return file_timeout + BACKSTOP_GRACE_S + ANSWER_MARGIN_S


@dataclass
class _Work:
    """What is left to run, what came back, and which files are suspects of a dead worker."""

    queue: deque[str]
    alone: deque[str] = field(default_factory=deque)  # suspects, to run again one at a time
    suspected: set[str] = field(default_factory=set)
    results: dict[str, FileResult] = field(default_factory=dict)
    stopped: int = 0  # answers that are a stop (a transient error: the budget)


@dataclass(frozen=True)
class Pool:
    """How to start the workers, and how long one file may take (None: no limit)."""

    jobs: int
    job: Callable[[str], FileResult]
    initializer: Callable[..., None]
    initargs: tuple[Any, ...]
    limit: float | None


Running = dict["futures.Future[FileResult]", tuple[str, float]]  # each file in flight, and when it started


def run_in_workers(paths: list[str], pool: Pool) -> dict[str, FileResult]:
    """Each path's result, analysed by `pool.job` in worker processes (started in this order)."""
    work = _Work(deque(paths))
    while work.queue or work.alone:
        _run_one_pool(work, pool)
    return work.results


def _run_one_pool(work: _Work, pool: Pool) -> None:
    """Hand files to one pool of workers until all are done, the pool is lost (a worker hung or
    died: what was in flight then is put back in `work` for the next pool), or its workers
    stopped enough files to be replaced."""
    # Looked up at each call, not imported by name: a test counts the pools through the module.
    pool_class = futures.ProcessPoolExecutor
    with pool_class(pool.jobs, initializer=pool.initializer, initargs=pool.initargs) as executor:
        running: Running = {}
        stopped_before = work.stopped
        grown = False
        while True:
            if work.stopped - stopped_before < RETIRE_AFTER_STOPS and not grown:
                _hand_out(executor, work, running, pool)
            if not running:
                return
            left = _time_left(running, pool.limit)
            done, _ = futures.wait(running, timeout=left, return_when=futures.FIRST_COMPLETED)
            if _collect(done, running, work) or _stop_the_late(executor, running, work, pool.limit):
                return
            grown = grown or (bool(work.queue) and _largest_worker(executor) > RETIRE_ABOVE_BYTES)


def _hand_out(executor: futures.ProcessPoolExecutor, work: _Work, running: Running, pool: Pool) -> None:
    """Start files while a worker is free; the suspects of a dead worker first, one at a time."""
    if work.alone:
        if not running:
            path = work.alone.popleft()
            running[executor.submit(pool.job, path)] = (path, time.monotonic())
        return
    while work.queue and len(running) < pool.jobs:
        path = work.queue.popleft()
        running[executor.submit(pool.job, path)] = (path, time.monotonic())


def _time_left(running: Running, limit: float | None) -> float | None:
    """Until the oldest file in flight is past its limit."""
    if limit is None:
        return None
    oldest = min(started for _, started in running.values())
    return max(0.0, oldest + limit - time.monotonic())


def _collect(done: set[futures.Future[FileResult]], running: Running, work: _Work) -> bool:
    """Take the answers in `done`; True when a worker died, which loses the pool: the files in
    flight are suspects, run again alone, and a suspect that was alone is reported."""
    for future in done:
        path, _ = running.pop(future)
        try:
            result = work.results[path] = future.result()
            if result.error is not None and result.error.transient:
                work.stopped += 1
        except BrokenProcessPool:
            if path in work.suspected:  # it ran alone
                work.results[path] = FileResult(path=path, error=died_error(path))
            suspects = [p for p in [path, *(other for other, _ in running.values())] if p not in work.results]
            running.clear()
            work.suspected.update(suspects)
            work.alone.extend(suspects)
            return True
    return False


def _stop_the_late(
    executor: futures.ProcessPoolExecutor, running: Running, work: _Work, limit: float | None
) -> bool:
    """Report each file in flight past `limit` and kill the pool's workers (True); the other files
    in flight start again first in the next pool. False when none is late."""
    if limit is None:
        return False
    now = time.monotonic()
    late = [path for path, started in running.values() if now - started >= limit]
    if not late:
        return False
    for path in late:
        work.results[path] = FileResult(path=path, error=late_error(path, limit))
    for path, _ in reversed(list(running.values())):
        if path not in work.results:
            (work.alone if path in work.suspected else work.queue).appendleft(path)
    running.clear()
    # No call to stop one worker: the pool's processes are its own; killing them breaks the pool,
    # whose shutdown then returns at once.
    for process in list((executor._processes or {}).values()):
        process.kill()
    return True


def _largest_worker(executor: futures.ProcessPoolExecutor) -> int:
    """The resident size in bytes of the pool's largest worker (0 where /proc does not say)."""
    largest = 0
    for process in list((executor._processes or {}).values()):
        try:
            with open(f"/proc/{process.pid}/statm", encoding="ascii") as stream:
                pages = int(stream.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        largest = max(largest, pages * _PAGE_BYTES)
    return largest


def _page_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # Windows: no /proc to read either
        return 4096


_PAGE_BYTES = _page_bytes()


def late_error(path: str, limit: float) -> FileError:
    return FileError(
        path,
        f"analysis stopped: its worker process gave no answer within {limit:g} s (the per-file safety "
        "clock, its backstop and a margin); the worker was killed",
        transient=True,
    )


def died_error(path: str) -> FileError:
    return FileError(
        path,
        "analysis stopped: the worker process analysing it died (killed, out of memory, or a crash "
        "in native code)",
        transient=True,
    )
