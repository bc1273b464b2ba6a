"""Time and peak memory of the offline analysis (`collcheck trace`) on large synthetic traces.

    python bench/trace_scale.py                      # 16 x 40K, 256 x 10K, 1,024 x 1K, binary
    python bench/trace_scale.py --json --size 64x10000 --formats text,perfetto  # JSON Lines traces
    python bench/trace_scale.py --pythonpath /work/main --json --schema 1   # another checkout, old traces
    python bench/trace_scale.py --live --size 16x40000   # binary traces as the tracer writes them live

Each size R x E writes R rank traces of E collectives each into a temporary folder (never inside
the repository; removed afterwards unless --keep), in the format the tracer writes: a header, the
reserved `lost` line, one `coll` line and one `done` line per collective, an exit line. Schema 2
(the default, what the tracer writes now) defines each group's member list once, in a `group`
line before the group's first `coll` line; `--schema 1` puts the member list on every `coll`
line, as the tracer did before. Every fourth collective is on a second group holding the even ranks
(the odd ranks issue nothing there), call sites alternate between two lines. Then `collcheck
trace` runs in a child process for each format; its wall time and peak resident memory (the
child's own `ru_maxrss`, from wait4) are printed, with the collectives read per second (all
ranks' together, the child's start included). By default the traces are written in collcheck's
binary format (`.ccbin`, trace_binary.py: the same lines, each collective a record of its template
with its `done` folded in) and the last rank's last few world-group collectives reduce a bigger
tensor, so the analysis reads every collective and finds a divergence at the end (`--json` writes
JSON Lines, `--no-divergence` keeps every rank alike). Exits 1 when a run failed (a status outside
0-3, or past --timeout) or, with a divergence written, when the run did not exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = ("16x40000", "256x10000", "1024x1000")
FORMATS = ("text",)
SUBGROUP_EVERY = 4  # every fourth collective is on the even ranks' group


@dataclass(frozen=True)
class Size:
    ranks: int
    events: int

    @property
    def label(self) -> str:
        return f"{self.ranks} x {self.events:,}"

    @property
    def collectives(self) -> int:
        """All ranks' collectives: the odd ranks skip the even ranks' group."""
        on_subgroup = self.events // SUBGROUP_EVERY
        return self.ranks * self.events - (self.ranks // 2) * on_subgroup


@dataclass(frozen=True)
class Measured:
    size: Size
    output_format: str
    seconds: float
    peak_mib: float
    status: int
    cpu_seconds: float = 0.0  # the child's user + system time: what the machine's other load does not change


def parse_size(text: str) -> Size:
    ranks, _, events = text.lower().partition("x")
    return Size(int(ranks), int(events))


def write_traces(
    folder: Path, size: Size, schema: int = 2, binary: bool = False, diverge: bool = False, live: bool = False
) -> int:
    """Write `size.ranks` traces of `size.events` collectives into `folder`; return the bytes written.
    `binary`: collcheck's binary format (`.ccbin`, the same lines: each collective a record);
    `live`: that format written by the tracer's own writer (trace_live.BinaryTraceWriter, as
    `collcheck run --trace-format binary` writes it), line by line;
    `diverge`: the last rank's last collective of the world group reduces a bigger tensor."""
    world = ",".join(map(str, range(size.ranks)))
    evens = ",".join(map(str, range(0, size.ranks, 2)))
    total = 0
    for rank in range(size.ranks):
        last = diverge and rank == size.ranks - 1
        if binary or live:
            path = folder / f"collcheck-rank{rank}.ccbin"
            write = _write_live if live else _write_binary
            write(path, _rank_lines(rank, size, world, evens, schema, last))
        else:
            path = folder / f"collcheck-rank{rank}.jsonl"
            with open(path, "w", encoding="utf-8") as handle:
                for chunk in _rank_lines(rank, size, world, evens, schema, last):
                    handle.write(chunk)
        total += path.stat().st_size
    return total


def _write_binary(path: Path, chunks: Iterator[str]) -> None:
    """The lines of `chunks` as the binary writer writes them: a `coll` line as a record of its
    template, its `done` line folded into that record, any other line as it is."""
    from collcheck.runtime.trace_binary import COLL_LINE, DONE, BinaryWriter

    writer = BinaryWriter(str(path))
    offsets: dict[tuple[str, int], int] = {}
    try:
        for chunk in chunks:
            for line in chunk.encode().splitlines():
                found = COLL_LINE.match(line)
                if found is not None:
                    before, seq, middle, start, after = found.groups()
                    group = line.split(b'"group":"', 1)[1].split(b'"', 1)[0].decode()
                    template = writer.template((before, middle, after))
                    offsets[(group, int(seq))] = writer.coll(template, int(seq), float(start))
                elif line.startswith(b'{"ev":"done"'):
                    row = json.loads(line)
                    writer.mark(offsets.pop((row["group"], row["seq"])), DONE, row["t_end"])
                else:
                    writer.line(line)
    finally:
        writer.close()


def _write_live(path: Path, chunks: Iterator[str]) -> None:
    """The lines of `chunks` through the tracer's live binary writer, one call per line."""
    from collcheck.runtime.trace_live import BinaryTraceWriter

    writer = BinaryTraceWriter(str(path))
    try:
        for chunk in chunks:
            for line in chunk.splitlines(keepends=True):
                writer.write_line(line)
    finally:
        writer.close()


CHUNK = 10_000  # collectives per write: a 100K-collective trace is never held whole


def _rank_lines(
    rank: int, size: Size, world: str, evens: str, schema: int, diverge: bool = False
) -> Iterator[str]:
    lines = [
        f'{{"ev":"header","schema":{schema},"rank":{rank},"world_size":{size.ranks},"pid":{1000 + rank},'
        f'"mode":"async","t":1000.0}}\n',
        '{"ev":"lost","n":0,"error":""}\n',
    ]
    if schema == 1:
        heads = {
            "0": f'{{"ev":"coll","rank":{rank},"group":"0","group_ranks":[{world}],"seq":',
            "1": f'{{"ev":"coll","rank":{rank},"group":"1","group_ranks":[{evens}],"seq":',
        }
        tail = ',"group_desc":""}\n'
    else:
        heads = {
            "0": f'{{"ev":"coll","rank":{rank},"group":"0","gid":1,"seq":',
            "1": f'{{"ev":"coll","rank":{rank},"group":"1","gid":2,"seq":',
        }
        tail = "}\n"
    definitions = {
        "0": f'{{"ev":"group","gid":1,"group":"0","ranks":[{world}],"desc":""}}\n',
        "1": f'{{"ev":"group","gid":2,"group":"1","ranks":[{evens}],"desc":""}}\n',
    }
    seqs = {"0": 0, "1": 0}
    t = 1000.0 + rank * 1e-4
    for index in range(size.events):
        group = "1" if index % SUBGROUP_EVERY == SUBGROUP_EVERY - 1 else "0"
        if group == "1" and rank % 2:
            continue
        seqs[group] += 1
        seq = seqs[group]
        if seq == 1 and schema != 1:
            lines.append(definitions[group])
        line = 10 + index % 2
        t += 1e-3
        numel = 2048 if diverge and group == "0" and index >= size.events - SUBGROUP_EVERY else 1024
        lines.append(
            f'{heads[group]}{seq},"op":"all_reduce","shapes":[[{numel}]],"dtypes":["float32"],"reduce_op":"sum",'
            f'"root":null,"site":{{"file":"/job/train.py","line":{line},"func":"step",'
            f'"stack":["/job/train.py:{line} in step","/job/train.py:40 in main"],"via":""}},'
            f'"thread":"MainThread","t_start":{t!r}{tail}'
        )
        lines.append(f'{{"ev":"done","group":"{group}","seq":{seq},"t_end":{t + 5e-4!r},"ok":true}}\n')
        if len(lines) >= 2 * CHUNK:
            yield "".join(lines)
            lines.clear()
    lines.append('{"ev":"exit"}\n')
    yield "".join(lines)


def measure(folder: Path, size: Size, output_format: str, pythonpath: str, timeout: float) -> Measured:
    """Run `collcheck trace` on `folder` in a child process; its time and peak RSS."""
    out = folder.parent / f"out.{output_format}"
    command = [sys.executable, "-m", "collcheck", "trace", str(folder), "--format", output_format]
    command += ["-o", str(out)]
    env = dict(os.environ, PYTHONPATH=pythonpath)
    start = time.monotonic()
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=pythonpath
    )
    try:
        status, usage = _wait(child, timeout)
    except BaseException:  # the bench was stopped: so is the run
        child.kill()
        child.wait()
        raise
    seconds = time.monotonic() - start
    if status not in (0, 1, 3):
        assert child.stderr is not None
        sys.stderr.write(child.stderr.read().decode("utf-8", "replace")[-2000:])
    if out.exists():
        out.unlink()
    cpu = usage.ru_utime + usage.ru_stime
    return Measured(size, output_format, seconds, usage.ru_maxrss / 1024, status, cpu)


def _wait(child: subprocess.Popen[bytes], timeout: float) -> tuple[int, resource.struct_rusage]:
    """The child's exit status (-9 when killed at `timeout`) and its own resource usage."""
    deadline = time.monotonic() + timeout
    while True:
        pid, raw, usage = os.wait4(child.pid, os.WNOHANG)
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(raw)
            return child.returncode, usage
        if time.monotonic() > deadline:
            child.kill()
            _, raw, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(raw)
            return child.returncode, usage
        time.sleep(0.05)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", action="append", help=f"RANKSxEVENTS (repeatable); default: {', '.join(DEFAULT_SIZES)}"
    )
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: text, json, perfetto")
    parser.add_argument("--pythonpath", default=str(REPO), help="the collcheck checkout to measure")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--tmp", default=None, help="where the temporary folders go (default: the system's)")
    parser.add_argument("--keep", action="store_true", help="keep the generated traces")
    parser.add_argument(
        "--schema", type=int, choices=(1, 2), default=2, help="trace schema (1: members on each line)"
    )
    parser.add_argument("--json", action="store_true", help="write JSON Lines traces, not binary ones")
    parser.add_argument(
        "--live",
        action="store_true",
        help="binary traces written by the tracer's live writer (trace_live.py)",
    )
    parser.add_argument("--no-divergence", action="store_true", help="every rank issues the same")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)  # a stopped bench still removes its traces
    sizes = [parse_size(text) for text in (args.size or DEFAULT_SIZES)]
    failed = False
    print(
        f"{'size':>14}  {'format':<9} {'trace MB':>9} {'seconds':>8} {'events/s':>10} {'CPU s':>7} "
        f"{'events/CPU s':>12} {'peak RSS MiB':>13} status",
        flush=True,
    )
    diverge = not args.no_divergence
    for size in sizes:
        scratch = Path(tempfile.mkdtemp(prefix="collcheck-trace-scale-", dir=args.tmp))
        try:
            folder = scratch / "traces"
            folder.mkdir()
            written = write_traces(folder, size, args.schema, not args.json, diverge, args.live)
            for output_format in args.formats.split(","):
                found = measure(folder, size, output_format, args.pythonpath, args.timeout)
                failed = failed or found.status not in ((1,) if diverge else (0, 1, 3))
                rate = size.collectives / found.seconds
                cpu_rate = size.collectives / max(found.cpu_seconds, 1e-6)
                print(
                    f"{size.label:>14}  {output_format:<9} {written / 1e6:9.0f} {found.seconds:8.1f} "
                    f"{rate:10,.0f} {found.cpu_seconds:7.2f} {cpu_rate:12,.0f} {found.peak_mib:13.0f} "
                    f"{found.status}",
                    flush=True,
                )
        finally:
            if args.keep:
                print(f"kept {scratch}")
            else:
                shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
