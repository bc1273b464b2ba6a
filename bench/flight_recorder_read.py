"""Reading Flight Recorder dumps: entries per second and peak memory, this checkout against another.

    python bench/flight_recorder_read.py [--ranks 16] [--entries 40000] [--against DIR]
                                         [--repeat 1] [--analysis] [--first] [--diverge-at N]
                                         [--keep FOLDER]

Writes `--ranks` dumps of `--entries` entries each, as torch writes them (`_dump_fr_trace()`:
protocol 2, every string written once and named by its memo slot after that, a frame dict shared
by many entries written once, integers in the smallest opcode that holds them; `torch_pickle`
below, checked byte for byte against real torch 2.13 dumps in tests/runtime/test_fr_pickle.py).
Each rank's loop issues four collectives per step from three call sites with two shapes; the last
rank's last entry is a broadcast where the others all_reduce, so a divergence is there to find
at the end. Then, in a child process per checkout (this one, and `--against DIR`'s collcheck, the
"before"), best of `--repeat`:

* read: `trace_load.load_file` of every dump (the events of each, as `collcheck trace` reads a
  folder of dumps): entries per second and the child's peak RSS;
* with `--analysis`, `collcheck trace FOLDER` (the streaming analysis, text): entries per second
  of the whole command, its peak RSS, and that it reported the divergence;
* with `--first`, `collcheck trace FOLDER --first`, text and `--format json`, the same way, and
  whether every checkout printed the same bytes (`--analysis` compares the full report too).
  `--diverge-at N` puts the divergence at entry N of the last rank instead of its last.

Not a test; prints its figures and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIRST_JSON = ("--first", "--format", "json")


class TorchPickler:
    """Pickles plain data the way torch's C++ pickler writes a Flight Recorder dump."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.strings: dict[str, int] = {}
        self.shared: dict[int, int] = {}
        self.uses: dict[int, int] = {}
        self.slots = 0

    def dumps(self, value: Any) -> bytes:
        self._count(value)
        self.uses[id(value)] = 2  # torch holds the top-level dict twice while it writes it
        self._push(value)
        self.out += b"."
        return bytes(self.out)

    def _count(self, value: Any) -> None:
        """How often each dict object occurs: torch memoizes a value held more than once."""
        work = [value]
        while work:
            item = work.pop()
            if isinstance(item, dict):
                self.uses[id(item)] = self.uses.get(id(item), 0) + 1
                if self.uses[id(item)] == 1:
                    work.extend(item.values())
            elif isinstance(item, (list, tuple)):
                work.extend(item)

    def _put(self) -> None:
        self.out += b"q" + bytes((self.slots,)) if self.slots < 256 else b"r" + struct.pack("<I", self.slots)
        self.slots += 1

    def _get(self, slot: int) -> None:
        self.out += b"h" + bytes((slot,)) if slot < 256 else b"j" + struct.pack("<I", slot)

    def _push(self, value: Any) -> None:
        out = self.out
        if value is None:
            out += b"N"
        elif value is True or value is False:
            out += b"\x88" if value else b"\x89"
        elif isinstance(value, int):
            if 0 <= value < 256:
                out += b"K" + bytes((value,))
            elif 0 <= value < 65536:
                out += b"M" + struct.pack("<H", value)
            elif -(2**31) <= value < 2**31:
                out += b"J" + struct.pack("<i", value)
            else:
                out += b"\x8a\x08" + struct.pack("<q", value)
        elif isinstance(value, str):
            slot = self.strings.get(value)
            if slot is not None:
                self._get(slot)
                return
            data = value.encode()
            out += b"X" + struct.pack("<I", len(data)) + data
            self.strings[value] = self.slots
            self._put()
        elif isinstance(value, tuple):
            if len(value) > 3:
                out += b"("
            for item in value:
                self._push(item)
            out += {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(value), b"t")
        elif isinstance(value, list):
            out += b"]("
            for item in value:
                self._push(item)
            out += b"e"
        elif isinstance(value, dict):
            shared = self.uses.get(id(value), 0) > 1
            if shared and id(value) in self.shared:
                self._get(self.shared[id(value)])
                return
            out += b"}("
            for key, item in value.items():
                self._push(key)
                self._push(item)
            out += b"u"
            if shared:
                self.shared[id(value)] = self.slots
                self._put()
        else:
            raise TypeError(type(value))


def torch_pickle(value: Any) -> bytes:
    return TorchPickler().dumps(value)


def _frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"name": name, "filename": filename, "line": line}


def dump_of(rank: int, ranks: int, entries: int, diverge: bool, at: int = 0) -> dict[str, Any]:
    """A dump of one rank's loop (see the module's docstring); with `diverge`, entry `at` (the
    last when 0) is a broadcast."""
    torch_frames = [
        _frame("/x/site-packages/torch/distributed/distributed_c10d.py", 3245, "all_reduce"),
        _frame("/x/site-packages/torch/distributed/c10d_logger.py", 81, "wrapper"),
    ]
    loop = _frame("/job/train.py", 90, "<module>")
    sites = [[*torch_frames, _frame("/job/train.py", line, "step"), loop] for line in (40, 41, 42)]
    steps = [
        ("gloo:all_reduce", sites[0], [[1024]]),
        ("gloo:all_reduce", sites[1], [[4, 4]]),
        ("gloo:all_reduce", sites[0], [[1024]]),
        ("gloo:broadcast", sites[2], [[16]]),
    ]
    made = []
    for seq in range(1, entries + 1):
        name, frames, sizes = steps[seq % len(steps)]
        if diverge and seq == (at or entries):
            name, frames, sizes = "gloo:broadcast", sites[2], [[16]]
        created = 1_796_138_215_102_360_814 + seq * 40_000
        made.append(
            {
                "frames": frames,
                "record_id": seq - 1,
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "thread_name": "python",
                "thread_id": "140618763025280",
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "profiling_name": name,
                "time_created_ns": created,
                "input_sizes": sizes,
                "input_dtypes": ["Float"] * len(sizes),
                "output_sizes": sizes,
                "output_dtypes": ["Float"] * len(sizes),
                "state": "completed",
                "time_discovered_started_ns": created + 5_000,
                "time_discovered_completed_ns": created + 30_000,
                "retired": True,
                "timeout_ms": 60000,
                "is_p2p": False,
            }
        )
    members = json.dumps(list(range(ranks)))
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": members}},
        "pg_status": {"0": {"last_enqueued_collective": entries, "last_completed_collective": entries}},
        "rank": rank,
        "entries": made,
    }


_READ = """
import resource, sys, time
import collcheck
assert collcheck.__file__.startswith(sys.argv[1]), collcheck.__file__
from collcheck.runtime.trace_load import load_file
paths = sys.argv[2:]
started, cpu = time.perf_counter(), time.process_time()
events = 0
for path in paths:
    events += len(load_file(path).events)
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
print(seconds, cpu, events, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _child(checkout: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`python ARGS` importing collcheck from `checkout` (run from it: `-c` puts the working
    folder first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=checkout, capture_output=True, text=True, check=False
    )


def _read(checkout: Path, paths: list[str]) -> tuple[float, float, int, int]:
    done = _child(checkout, ["-c", _READ, str(checkout.resolve()), *paths])
    if done.returncode:
        raise SystemExit(f"{checkout}: {done.stderr[-2000:]}")
    seconds, cpu, events, rss = done.stdout.split()
    return float(seconds), float(cpu), int(events), int(rss)


def _analysis(checkout: Path, folder: Path, *options: str) -> tuple[float, float, int, bool, str]:
    """`collcheck trace FOLDER OPTIONS` in a child: wall and CPU seconds, peak RSS, whether it
    found the divergence, and what it printed."""
    timer = "import resource, runpy, sys, time\n"
    timer += "started, cpu = time.perf_counter(), time.process_time()\n"
    timer += "sys.argv = ['collcheck', 'trace', *sys.argv[1:]]\n"
    timer += "try:\n    runpy.run_module('collcheck', run_name='__main__')\n"
    timer += "except SystemExit:\n    pass\n"
    timer += "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    timer += (
        "print('BENCH', time.perf_counter() - started, time.process_time() - cpu, rss, file=sys.stderr)\n"
    )
    done = _child(checkout, ["-c", timer, str(folder), *options])
    line = [text for text in done.stderr.splitlines() if text.startswith("BENCH ")]
    if not line:
        raise SystemExit(f"{checkout}: {done.stderr[-2000:]}")
    _, seconds, cpu, rss = line[-1].split()
    found = "first divergence" in done.stdout or '"kind": "mismatch"' in done.stdout  # text or JSON
    return float(seconds), float(cpu), int(rss), found, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--entries", type=int, default=40000)
    parser.add_argument("--against", type=Path, help="another checkout, measured the same way (before)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--analysis", action="store_true", help="also time `collcheck trace FOLDER`")
    parser.add_argument("--keep", type=Path, help="write the dumps here (unless there) and keep them")
    parser.add_argument(
        "--first", action="store_true", help="also time `collcheck trace FOLDER --first` (text and json)"
    )
    parser.add_argument(
        "--diverge-at",
        type=int,
        default=0,
        help="the last rank's entry that differs (default: its last)",
    )
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="collcheck-fr-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        paths = []
        for rank in range(args.ranks):
            path = folder / f"nccl_trace_rank_{rank}"
            if not (args.keep and path.exists()):  # a kept folder's dumps are written once
                dump = dump_of(rank, args.ranks, args.entries, rank == args.ranks - 1, args.diverge_at)
                path.write_bytes(torch_pickle(dump))
            paths.append(str(path))
        total = args.ranks * args.entries
        size = sum(os.path.getsize(path) for path in paths)
        print(
            f"{args.ranks} dumps x {args.entries:,} entries ({size / 2**20:.1f} MiB), written in "
            f"{time.perf_counter() - started:.1f} s"
        )
        outputs: dict[str, list[str]] = {}  # what each checkout printed, per command
        checkouts = [("this checkout", REPO)] + ([("--against", args.against)] if args.against else [])
        for label, checkout in checkouts:
            best = min((_read(checkout, paths) for _ in range(args.repeat)), key=lambda found: found[0])
            seconds, cpu, events, rss = best
            print(
                f"{label} ({checkout}): read {seconds:.2f} s, {total / seconds:,.0f} entries/s "
                f"({cpu:.2f} s of CPU: {total / cpu:,.0f} entries per CPU second), {events:,} events, "
                f"peak RSS {rss / 1024:.0f} MiB"
            )
            runs: list[tuple[str, tuple[str, ...]]] = [("collcheck trace", ())] if args.analysis else []
            if args.first:
                runs += [("collcheck trace --first", ("--first",)), ("--first --format json", FIRST_JSON)]
            for name, options in runs:
                seconds, cpu, rss, found, printed = min(
                    (_analysis(checkout, folder, *options) for _ in range(args.repeat)),
                    key=lambda found: found[0],
                )
                print(
                    f"  {name}: {seconds:.2f} s, {total / seconds:,.0f} entries/s ({cpu:.2f} s "
                    f"of CPU: {total / cpu:,.0f} entries per CPU second), peak RSS {rss / 1024:.0f} MiB, "
                    f"divergence {'found' if found else 'NOT found'}"
                )
                outputs.setdefault(name, []).append(printed)
        for name, texts in outputs.items():
            if len(texts) > 1:
                print(f"{name}: output {'the same' if len(set(texts)) == 1 else 'DIFFERENT'} byte for byte")
        print(f"load average (1 min): {os.getloadavg()[0]:.1f}")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
