"""The CPU time and peak memory of a child process and its descendants, for bench/static_speed.py.

In: a command. Out: its wall and CPU seconds, its completed process, and its `Peak` memory: a
thread reads, every `RSS_INTERVAL_S`, `VmRSS` (/proc/<pid>/status) and `Pss` (smaps_rollup) of
the child and of every process below it (found from each process's parent in /proc/<pid>/stat;
the `children` files need a kernel option), and keeps the largest sum over the tree, the largest
single process, and the largest sum of Pss (a page shared by forked workers counted once in all).
`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss` would give only the largest single descendant ever
waited for. A peak shorter than the interval can be missed. Linux only (/proc).
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

RSS_INTERVAL_S = 0.05


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_parents() -> dict[int, int]:
    """pid -> parent pid of every process /proc shows (`children` files need a kernel option)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stream:
                stat = stream.read()
        except OSError:  # ended meanwhile
            continue
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so split after the last `)`
        parents[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return parents


def descendants(root: int, parents: dict[int, int]) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def resident_kb(pid: int) -> int:
    """VmRSS of `pid` in kB (0 when it ended, or is a zombie without one)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as stream:
            for line in stream:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def proportional_kb(pid: int) -> int:
    """Pss of `pid` in kB (/proc/<pid>/smaps_rollup: each shared page split among the processes
    that map it, so that a sum over processes counts it once); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii", errors="replace") as stream:
            for line in stream:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_rss_kb(root: int) -> tuple[int, int, int]:
    """(sum of VmRSS over `root` and its descendants, largest VmRSS of one of them, sum of their
    Pss), in kB."""
    pids = descendants(root, process_parents())
    sizes = [resident_kb(pid) for pid in pids]
    return sum(sizes), max(sizes, default=0), sum(proportional_kb(pid) for pid in pids)


@dataclass
class Peak:
    """The largest tree sum of RSS, the largest single process and the largest tree sum of PSS seen
    over a run's samples, in kB."""

    total_kb: int = 0
    largest_kb: int = 0
    proportional_kb: int = 0
    samples: int = 0

    def add(self, total_kb: int, largest_kb: int, proportional_kb: int = 0) -> None:
        self.total_kb = max(self.total_kb, total_kb)
        self.largest_kb = max(self.largest_kb, largest_kb)
        self.proportional_kb = max(self.proportional_kb, proportional_kb)
        self.samples += 1

    def describe(self) -> str:
        return (
            f"peak RSS {self.total_kb / 1024:.0f} MB (process tree), largest process "
            f"{self.largest_kb / 1024:.0f} MB, PSS {self.proportional_kb / 1024:.0f} MB, "
            f"{self.samples} samples"
        )


def timed_sampled(
    command: list[str], cwd: Path, timeout: float, interval: float = RSS_INTERVAL_S
) -> tuple[float, float, subprocess.CompletedProcess[str], float, Peak]:
    """`timed`, with a thread sampling the resident set of the child's process tree every `interval`
    seconds. The child is waited for as `subprocess.run` does (its pipes, then its exit), so the
    wall time is as precise as `timed`'s: the sampler never delays the end of a run."""
    load = os.getloadavg()[0]
    cpu_before = children_cpu()
    peak = Peak()
    done = threading.Event()
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sample() -> None:
        while not done.is_set():
            peak.add(*tree_rss_kb(process.pid))
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    finally:
        done.set()
    wall = time.perf_counter() - started
    sampler.join()
    completed = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    return wall, children_cpu() - cpu_before, completed, load, peak
