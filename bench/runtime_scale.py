"""What cross-rank verification costs per collective as jobs and groups grow (issue 16).

    python bench/runtime_scale.py [--ranks 2,4,8,16] [--members 16,128,1024] [--iters 1000]
                                   [--modes async,strict] [--backends gloo,fake] [--nodes 1,2]

Every rank is a process on this machine. Each runs `--iters` all_reduces of 256 floats on the
world group, untraced and under `collcheck run --verify` (async) and `--verify --strict`, with a
counting wrapper around the tracer's store client (every call it makes: requests, and bytes of
keys and values in both directions). Printed per rank count, backend and mode:

* added µs per collective: the traced loop's wall time per op minus the untraced one's (median
  over ranks), and the process CPU time per op added (all threads, median over ranks);
* store requests and bytes per collective per rank (mean over ranks), and the largest single
  value one rank wrote during the loop (a per-collective message, or a position);
* idle requests/s: the store requests a rank makes per second while it issues nothing (after
  the loop, for IDLE_S seconds; mean over ranks): what waiting for an abort and keeping its
  position fresh cost a rank that computes, or waits in a long collective.
* rh reads/op/rank and rh reads/s/rank: how often a rank read a leader's rolling hash (`rh/`)
  from the job store, per collective and per second of the loop (mean over ranks). `--nodes N`
  splits the ranks into N simulated nodes (as COLLCHECK_RANKS_PER_NODE does), each with its
  node relay in async mode: only the relays read `rh/` from the job store, once per tick.

`--inproc`: no processes and no torch job: a leader's and a follower's monitor in one process on
an in-memory store, fed the same events (groups of 2 to 10,000 members); their CPU time per
collective (issuing and background work, both ranks) and the bytes each writes and reads, free of
the scheduling noise of many processes on a small machine.

`gloo`: a real job of `--ranks` processes. `fake`: torch's `fake` backend (collectives return at
once, nothing is exchanged), `--ranks` real processes that are ranks 0..N-1 of a world of
`--members` simulated ranks: the group's member list is as long as that world's, so what grows
with the group shows up without a thousand processes. Not a test; prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NUMEL = 256
IDLE_S = 4.0  # seconds of no collectives over which idle requests are counted
COUNTED = frozenset(
    ("set", "get", "add", "check", "wait", "multi_set", "multi_get", "compare_set", "delete_key")
)


class Counts:
    """Requests and bytes through one or more store clients (shared, under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0
        self.largest = 0  # the largest value written in one request
        self.chain_reads = 0  # requests that read a rolling hash (`rh/`)

    def snapshot(self) -> tuple[int, int, int]:
        """(requests, bytes, rolling-hash reads) so far."""
        with self.lock:
            return self.requests, self.bytes, self.chain_reads


def _size(value: Any) -> int:
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_size(item) for item in value)
    return 8


def _largest_value(name: str, args: tuple[Any, ...]) -> int:
    """The largest single value a write request carries (0 for reads)."""
    if name == "multi_set":
        return max((_size(value) for value in args[1]), default=0)
    if name in ("set", "compare_set"):
        return _size(args[-1])
    return 0


class CountingStore:
    """Wraps a c10d store client: every call of COUNTED is one request; bytes are its arguments'
    and its result's."""

    def __init__(self, inner: Any, counts: Counts) -> None:
        self._inner = inner
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in COUNTED:
            return attr
        counts = self._counts

        def counted(*args: Any) -> Any:
            result = attr(*args)
            size = _size(args) + _size(result)
            written = _largest_value(name, args)
            chain = name in ("get", "multi_get", "compare_set") and _reads_chain(args[0])
            with counts.lock:
                counts.chain_reads += chain
                counts.requests += 1
                counts.bytes += size
                counts.largest = max(counts.largest, written)
            return result

        return counted


def _reads_chain(keys: Any) -> bool:
    """Whether a read's key (or one of its keys) is a rolling hash, `rh/<channel>`."""
    names = [keys] if isinstance(keys, str) else list(keys)
    return any(str(name).startswith("rh/") for name in names)


class DictStore:
    """An in-memory store with the calls the monitor makes (for `--inproc`), counting bytes."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.bytes = 0

    def _put(self, key: str, value: str | bytes) -> None:
        raw = value.encode() if isinstance(value, str) else value
        self.data[key] = raw
        self.bytes += len(key) + len(raw)

    def set(self, key: str, value: str | bytes) -> None:
        self._put(key, value)

    def multi_set(self, keys: list[str], values: list[str]) -> None:
        for key, value in zip(keys, values, strict=True):
            self._put(key, value)

    def get(self, key: str) -> bytes:
        self.bytes += len(key) + len(self.data[key])
        return self.data[key]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [self.get(key) for key in keys]

    def check(self, keys: list[str]) -> bool:
        return all(key in self.data for key in keys)

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        current = self.data.get(key)
        if (current is None and expected == "") or current == expected.encode():
            self._put(key, desired)
            return desired.encode()
        if current is None:
            return expected.encode()
        self.bytes += len(key) + len(current)
        return current

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None


class NullWriter:
    def write(self, data: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def inproc(members: int, collectives: int) -> tuple[float, float]:
    """(CPU µs per collective for a leader and a follower together, store bytes per collective)."""
    from collcheck.runtime.record import CallSite, CollectiveEvent
    from collcheck.runtime.verify import Monitor, MonitorConfig

    store = DictStore()
    ranks = tuple(range(members))  # one tuple per group, as the tracer keeps it
    monitors = []
    for rank in (0, 1):
        config = MonitorConfig(rank=rank, verify=True, strict=False, timeout_s=600, world_size=members)
        monitor = Monitor(config, writer=NullWriter(), store_factory=None)  # type: ignore[arg-type]
        monitor.store = monitor.sync_store = store
        monitors.append(monitor)
    site = CallSite("train.py", 10)

    def event(rank: int, seq: int) -> CollectiveEvent:
        return CollectiveEvent(
            rank,
            "0",
            ranks,
            seq,
            "all_reduce",
            ((256,),),
            ("float32",),
            "sum",
            site=site,
            t_start=time.time(),
        )

    for monitor in monitors:  # the first collective: agreed before issue, not measured
        monitor.issued(event(monitor.config.rank, 1))
    before, cpu = store.bytes, time.process_time()
    for seq in range(2, collectives + 2):
        for monitor in monitors:
            monitor.issued(event(monitor.config.rank, seq))
            monitor.completed("0", seq)  # a blocking collective: done before the next one
        if seq % 50 == 0:  # a 50 ms tick at 1,000 collectives a second
            for monitor in monitors:
                monitor.tick()
    for monitor in monitors:
        monitor.tick()
    spent = (time.process_time() - cpu) / collectives * 1e6
    return spent, (store.bytes - before) / collectives


def worker(backend: str, mode: str, iters: int, members: int, trace_dir: str, stall_s: float) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    counts = Counts()
    if mode != "untraced":
        import collcheck.runtime
        from collcheck.runtime import verify_store

        connect = verify_store.connect_store

        def counted_store(address: str | None, timeout: float) -> CountingStore:
            return CountingStore(connect(address, timeout), counts)

        verify_store.connect_store = counted_store  # the tracer's store client, counted
        collcheck.runtime.enable(
            trace_dir, verify=True, strict=mode == "strict", timeout=stall_s, adapters=False
        )
    port = int(os.environ["MASTER_PORT"])
    c10d: Any = dist  # TCPStore is re-exported without type stubs
    store = c10d.TCPStore("127.0.0.1", port, is_master=rank == 0, wait_for_workers=False)
    if backend == "fake":
        import torch.testing._internal.distributed.fake_pg  # registers "fake"

        dist.init_process_group("fake", store=store, rank=rank, world_size=members)
    else:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    tensor = torch.ones(NUMEL)
    for _ in range(max(iters // 10, 20)):
        dist.all_reduce(tensor)
    _sync(store, "warm", world)
    time.sleep(0.3)  # the background thread catches up with the warm-up
    before, window = counts.snapshot(), time.perf_counter()
    counts.largest = 0
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(iters):
        dist.all_reduce(tensor)
    wall = (time.perf_counter() - started) / iters
    cpu_per = (time.process_time() - cpu) / iters
    time.sleep(0.3)  # what the background thread does for the loop's last tick
    after, window = counts.snapshot(), time.perf_counter() - window
    time.sleep(1.0)  # positions settle after the loop
    idle_from = counts.snapshot()
    time.sleep(IDLE_S)
    idle = (counts.snapshot()[0] - idle_from[0]) / IDLE_S
    result = {
        "rank": rank,
        "us": wall * 1e6,
        "cpu_us": cpu_per * 1e6,
        "requests": (after[0] - before[0]) / iters,
        "bytes": (after[1] - before[1]) / iters,
        "chain_reads": (after[2] - before[2]) / iters,
        "chain_per_s": (after[2] - before[2]) / window,
        "largest": counts.largest,
        "idle": idle,
    }
    print("RESULT " + json.dumps(result), flush=True)
    _sync(store, "done", world)
    if rank == 0:  # hosts the store: leave last, once the others have gone
        deadline = time.time() + 60
        while int(store.add("left", 0)) < world - 1 and time.time() < deadline:
            time.sleep(0.05)
    dist.destroy_process_group()
    if rank != 0:
        store.add("left", 1)


def _sync(store: Any, name: str, world: int) -> None:
    store.add(name, 1)
    deadline = time.time() + 300
    while int(store.add(name, 0)) < world and time.time() < deadline:
        time.sleep(0.01)


def run(
    backend: str, mode: str, ranks: int, members: int, iters: int, stall_s: float, nodes: int = 1
) -> list[dict[str, Any]]:
    """One job; each rank's RESULT, with the collcheck lines it wrote to stderr (warnings). Its
    ranks are split into `nodes` simulated nodes (one node relay each, in async mode)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLCHECK_", "TORCH_DISTRIBUTED"))}
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(ranks),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        COLLCHECK_RANKS_PER_NODE=str(max(ranks // max(nodes, 1), 1)),
    )
    trace_dir = tempfile.mkdtemp(prefix="collcheck-scale-")
    command = [sys.executable, __file__, "--worker", backend, mode, str(iters), str(members), trace_dir]
    command.append(str(stall_s))
    processes = [
        subprocess.Popen(
            command, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for r in range(ranks)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=1800)
        if process.returncode != 0:
            raise SystemExit(f"{backend} {mode} {ranks} ranks failed:\n{err[-3000:]}")
        line = next(line for line in out.splitlines() if line.startswith("RESULT "))
        said = [line for line in err.splitlines() if line.startswith("collcheck:")]
        results.append(dict(json.loads(line[len("RESULT ") :]), said=said))
    return results


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _median(results: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in results)


def _mean(results: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(r[key]) for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", nargs=6)
    parser.add_argument("--ranks", default="2,4,8,16")
    parser.add_argument("--members", default="16,128,1024", help="simulated world sizes (fake backend)")
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--modes", default="async,strict")
    parser.add_argument("--backends", default="gloo,fake")
    parser.add_argument("--inproc", action="store_true", help="only the in-process measurement")
    parser.add_argument("--stall-timeout", type=float, default=600.0, help="collcheck's --timeout")
    parser.add_argument("--nodes", default="1", help="simulated nodes the ranks are split into (relays)")
    args = parser.parse_args()
    if args.worker:
        backend, mode, iters, members, trace_dir, stall_s = args.worker
        worker(backend, mode, int(iters), int(members), trace_dir, float(stall_s))
        return
    sys.path.insert(0, str(REPO))
    if args.inproc:
        print("members  cpu us/collective (leader + follower)  store bytes/collective")
        for members in (2, 16, 128, 1024, 10_000):
            spent, moved = inproc(members, args.iters)
            print(f"{members:7}  {spent:37.1f}  {moved:22.0f}", flush=True)
        return
    print(
        "backend  ranks  members  mode    added us/op  added cpu us/op  requests/op/rank  "
        "bytes/op/rank  largest value  idle requests/s/rank  nodes  rh reads/op/rank  rh reads/s/rank"
    )
    runs = [(mode, int(nodes)) for mode in args.modes.split(",") for nodes in args.nodes.split(",")]
    for backend in args.backends.split(","):
        sizes = [0] if backend == "gloo" else [int(m) for m in args.members.split(",")]
        for ranks in (int(r) for r in args.ranks.split(",")):
            for members in sizes:
                world = members or ranks
                base = run(backend, "untraced", ranks, world, args.iters, args.stall_timeout)
                for mode, nodes in runs:
                    traced = run(backend, mode, ranks, world, args.iters, args.stall_timeout, nodes)
                    print(
                        f"{backend:7}  {ranks:5}  {world:7}  {mode:6}  "
                        f"{_median(traced, 'us') - _median(base, 'us'):11.1f}  "
                        f"{_median(traced, 'cpu_us') - _median(base, 'cpu_us'):15.1f}  "
                        f"{_mean(traced, 'requests'):16.2f}  {_mean(traced, 'bytes'):13.0f}  "
                        f"{max(int(r['largest']) for r in traced):13}  "
                        f"{_mean(traced, 'idle'):20.2f}  {nodes:5}  "
                        f"{_mean(traced, 'chain_reads'):16.3f}  {_mean(traced, 'chain_per_s'):15.2f}",
                        flush=True,
                    )
                    for said in sorted({line for r in traced for line in r["said"]}):
                        print(f"    {said}")  # any warning a rank wrote (none expected)
    print(f"load average (1 min): {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
