"""Whether reading ranks in parallel pays on this machine: one process reading every rank's trace
against two processes reading half of the ranks each, at the same time.

    python bench/parallel_ranks.py [--size 16x40000] [--repeat 5] [--workers 2]

Writes R binary traces of E collectives (bench/trace_scale.py's synthetic traces, no divergence)
into a temporary folder, then, `--repeat` times, alternating which goes first:

* `scan`: the columnar reading layer alone (trace_binary.BinaryRecords: each chunk's column of
  first bytes, runs of collectives as views, text records decoded), what `collcheck trace` reads
  with before it compares;
* `decode`: every collective made an event (trace_load.load_file, what load_dir and the Perfetto
  export do).

Each is timed in one child process over all ranks, and in `--workers` children over a share of the
ranks each, started together (the wall time until the last ends). The children return only a
count, so the parallel figure is an upper bound of what parallel reading could gain: an analysis
would also have to bring the events (or their digests) back into one process to compare them.
Prints the median wall and CPU time of each, and the 1-minute load average range. Not a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_scale import parse_size, write_traces

REPO = Path(__file__).resolve().parents[1]
MODES = ("scan", "decode")


def worker(mode: str, paths: list[str]) -> None:
    from collcheck.runtime.trace_binary import BinaryRecords, CollRun
    from collcheck.runtime.trace_load import load_file

    count = 0
    for path in paths:
        if mode == "decode":
            trace = load_file(path)
            count += len(trace.events) if trace is not None else 0
            continue
        records = BinaryRecords(path)
        try:
            for chunk in records.chunks():
                count += sum(record.count for record in chunk if isinstance(record, CollRun))
        finally:
            records.close()
    print(count, flush=True)


def timed(mode: str, shares: list[list[str]]) -> tuple[float, float, int]:
    """(wall seconds until the last child ends, their CPU seconds, events) for one child per share."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", mode, *share], env=env, stdout=subprocess.PIPE, text=True
        )
        for share in shares
    ]
    counts = [int(child.communicate()[0].split()[-1]) for child in children]
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, sum(counts)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", choices=MODES)
    parser.add_argument("--size", default="16x40000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.paths)
        return 0
    size = parse_size(args.size)
    folder = Path(tempfile.mkdtemp(prefix="collcheck-parallel-"))
    try:
        write_traces(folder, size, binary=True)
        paths = sorted(str(path) for path in folder.iterdir())
        shares = [paths[index :: args.workers] for index in range(args.workers)]
        results: dict[tuple[str, int], list[tuple[float, float]]] = {}
        loads = []
        for run in range(args.repeat):
            for mode in MODES:
                order = [[paths], shares] if run % 2 == 0 else [shares, [paths]]
                for split in order:
                    loads.append(os.getloadavg()[0])
                    wall, cpu, events = timed(mode, split)
                    results.setdefault((mode, len(split)), []).append((wall, cpu))
        print(f"{size.label} binary traces ({events:,} collectives), median of {args.repeat} runs:")
        for (mode, processes), values in sorted(results.items()):
            wall = statistics.median(value[0] for value in values)
            cpu = statistics.median(value[1] for value in values)
            print(
                f"  {mode}, {processes} process(es): {wall:.2f} s wall ({events / wall:,.0f} collectives/s), "
                f"{cpu:.2f} s CPU  [walls: {', '.join(f'{value[0]:.2f}' for value in values)}]"
            )
        print(f"1-minute load average: {min(loads):.2f} to {max(loads):.2f} ({os.cpu_count()} CPUs)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
