"""Where the time of reading a Flight Recorder dump goes (trace_read.load_flight_recorder).

    python bench/flight_recorder_read.py [--entries 2000,100000] [--repeat 3]

Writes a pickled dump of N all_reduce entries shaped as torch 2.13's gloo dumps (as
tests/runtime/test_analyze.py builds them: four frames, sizes, dtypes, times), then times, best of
`--repeat`: the plain unpickling alone (C), the walk that bounds what an untrusted pickle may
expand to (trace_read.check_dump_shape, one Python step per value), and the whole read into events
(unpickle + walk + one event per entry). Prints entries per second of each. Not a test.
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def entry(seq: int) -> dict[str, Any]:
    frames = [
        {
            "filename": "/x/site-packages/torch/distributed/distributed_c10d.py",
            "line": 3245,
            "name": "all_reduce",
        },
        {"filename": "/x/site-packages/torch/distributed/c10d_logger.py", "line": 81, "name": "wrapper"},
        {"filename": "/job/train.py", "line": 40 + seq % 3, "name": "step"},
        {"filename": "/job/train.py", "line": 90, "name": "<module>"},
    ]
    return {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "is_p2p": False,
        "pg_id": 0,
        "op_id": seq,
        "process_group": ("0", "default_pg"),
        "profiling_name": "gloo:all_reduce",
        "record_id": seq - 1,
        "input_sizes": [[1024]],
        "input_dtypes": ["Float"],
        "output_sizes": [[1024]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "retired": True,
        "time_created_ns": 10**18 + seq,
        "time_discovered_started_ns": 10**18 + seq + 5,
        "time_discovered_completed_ns": 10**18 + seq + 9,
        "timeout_ms": 1800000,
        "thread_name": "python",
        "frames": frames,
    }


def best(repeat: int, work: Any, argument: Any) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work(argument)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    from collcheck.runtime.trace_read import check_dump_shape, load_flight_recorder

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", default="2000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="collcheck-fr-"))
    try:
        for count in (int(text) for text in args.entries.split(",")):
            dump = {
                "version": "2.10",
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                "pg_status": {},
                "entries": [entry(seq) for seq in range(1, count + 1)],
            }
            path = folder / "nccl_trace_rank_0"
            path.write_bytes(pickle.dumps(dump, protocol=4))
            data = path.read_bytes()
            unpickle = best(args.repeat, pickle.loads, data)
            loaded = pickle.loads(data)
            walk = best(args.repeat, check_dump_shape, loaded)
            whole = best(args.repeat, load_flight_recorder, str(path))
            read = load_flight_recorder(str(path))
            assert read is not None and len(read.events) == count, read
            print(f"{count:,} entries ({len(data) / 2**20:.1f} MiB):")
            for what, seconds in (("unpickle", unpickle), ("shape walk", walk), ("whole read", whole)):
                print(f"  {what}: {seconds:.3f} s ({count / seconds:,.0f} entries/s)")
            rest = whole - unpickle - walk
            print(f"  events from entries (the rest): {rest:.3f} s ({count / rest:,.0f} entries/s)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
