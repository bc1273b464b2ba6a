"""CPU seconds of cold `collcheck check` runs of several source trees, interleaved.

    python bench/compare_speed.py TREE [TREE ...] [--target PATH] [--rounds 3] [--extra ARG ...]

Each TREE is a collcheck source folder (this checkout, or an older commit unpacked with
`git archive <commit> | tar -x -C DIR`). Each round runs every tree once, in turn, as
`python -m collcheck check TARGET --no-cache -j 1 --file-timeout 0 --format json -o FILE` with
PYTHONPATH=TREE (TARGET: the installed torch's `torch/distributed` unless given), so a change in
the machine's load touches every tree alike. Printed: each run's CPU seconds (user+sys of the run
and its children; on a shared machine much steadier than wall time) and wall time, then the
minimum and median CPU per tree, and whether every tree's last JSON report is byte-identical to
the first tree's. `--file-timeout 0`: a loaded machine would otherwise stop the largest file at
its wall-clock budget, cutting its work short by a different amount in each run (`--extra
--file-timeout --extra 10` puts a budget back; trees older than that option need it left out).

In: source trees and a target folder. Out: a table on stdout. Not a test: it takes minutes.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _torch_distributed() -> Path:
    import torch

    return Path(torch.__file__).parent / "distributed"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(tree: Path, target: Path, report: Path, extra: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one cold run of `tree` on `target`; its JSON goes to `report`."""
    command = [sys.executable, "-m", "collcheck", "check", str(target), "--no-cache", "-j", "1"]
    command += [*extra, "--format", "json", "-o", str(report)]
    env = dict(os.environ, PYTHONPATH=str(tree))
    cpu_before, started = _children_cpu(), time.perf_counter()
    subprocess.run(command, cwd=tree, env=env, capture_output=True, check=False, timeout=3600)
    return _children_cpu() - cpu_before, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", type=Path, nargs="+")
    parser.add_argument("--target", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--extra", action="append", default=None, help="one more argument of each run")
    options = parser.parse_args(argv)
    target = (options.target or _torch_distributed()).resolve()  # each run starts in its tree
    extra = options.extra if options.extra is not None else ["--file-timeout", "0"]
    trees = [tree.resolve() for tree in options.trees]
    cpu: dict[Path, list[float]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as folder:
        reports = {tree: Path(folder) / f"{index}.json" for index, tree in enumerate(trees)}
        for round_ in range(options.rounds):
            for tree in trees:
                seconds, wall = run_once(tree, target, reports[tree], extra)
                cpu[tree].append(seconds)
                load = os.getloadavg()[0]
                line = f"round {round_} {tree}: cpu {seconds:.2f} s, wall {wall:.2f} s, load {load:.1f}"
                print(line, flush=True)
        first = reports[trees[0]].read_bytes() if reports[trees[0]].exists() else b""
        same = {tree: reports[tree].exists() and reports[tree].read_bytes() == first for tree in trees}
    for tree in trees:
        runs = cpu[tree]
        print(
            f"{tree}: cpu min {min(runs):.2f} s, median {statistics.median(runs):.2f} s;"
            f" report {'identical to the first tree' if same[tree] else 'DIFFERS from the first tree'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
