"""Fuzz `collcheck trace` with mutated trace folders built from a real small trace.

    python bench/fuzz_traces.py [--cases 5000] [--seed 1] [--keep DIR] [--case-limit-s 10]

Each case copies the seed folders (tests/runtime/data: the collcheck traces, in both trace
schemas, and the Flight Recorder dumps of a real 2-rank gloo job), applies one to four
mutations (a line replaced by a number, invalid UTF-8, deep nesting, huge numbers, wrong field
types, bytes flipped, files truncated, emptied, removed or duplicated, dump fields replaced,
dumps lengthened into loops written as torch writes them (read as runs by fr_pickle.py),
crafted pickles), then runs `collcheck trace` in this process in a random format. A case fails
when it raises (a traceback), runs past `--case-limit-s`, or exits with a status outside 0-3
(see docs/runtime.md). Failing folders are kept under `--keep`. Exits 1 when any case failed.
tests/runtime/test_fuzz_traces.py runs a few hundred cases of the same generator.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib.util
import io
import json
import os
import pickle
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "runtime" / "data"
# The job's traces (schema 1: member lists on every line), its dumps, and the same traces in
# schema 2 (member lists in `group` lines); the two trace folders hold the same file names.
SEEDS = (DATA / "seed_trace", DATA / "seed_fr", DATA / "seed_trace_v2")
CHOICES = (SEEDS[:1], SEEDS[1:2], SEEDS[:2], SEEDS[2:], SEEDS[1:])
STATUSES = {0, 1, 2, 3}
FORMATS = ("text", "json", "perfetto")

# Values that break code expecting a well-formed field.
HOSTILE: tuple[Any, ...] = (
    None,
    True,
    -1,
    0,
    2**70,
    -(2**63),
    1e308,
    -1e308,
    0.5,
    "x",
    "",
    "5",
    "\u0000",
    "\udcff",
    "é" * 50,
    [],
    {},
    [[1, [2]]],
    [None],
    {"a": {"b": []}},
    ["x", "y"],
    [[-1, 2**65]],
)
RAW_LINES: tuple[bytes, ...] = (
    b"42",
    b"\xff\xfe\xfd",
    b"null",
    b'"just a string"',
    b"[1, 2, 3]",
    b"{}",
    b'{"ev": "coll"}',
    b'{"ev": "coll", "seq": "x"}',
    b'{"ev": "done", "group": [], "seq": {}}',
    b'{"ev": "header", "rank": "zero"}',
    b'{"ev": "lost", "n": 1e999}',
    b'{"ev": "coll", "t_start": 1e999}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
    b"1" * 5_000,
    b'{"ev": "coll", "rank": ' + b"9" * 5_000 + b"}",
    b"NaN",
    b'{"ev": "report", "text": ' + b'"' + b"x" * 100_000 + b'"}',
    b'{"ev":"coll","rank":0,"group":"0","group_ranks":[0,1],"seq":1,"op":"all_reduce","shapes":'
    b'[[1e400]],"dtypes":["float32"]}',
    # Group lines and the coll lines that name them (schema 2): undefined, redefined, absurd.
    b'{"ev":"group","gid":1,"group":"0","ranks":[0,1,2,3],"desc":""}',
    b'{"ev":"group","gid":1,"group":"9","ranks":[0,1],"desc":"default_pg"}',
    b'{"ev":"group","gid":-1,"group":"0","ranks":[0,1],"desc":""}',
    b'{"ev":"group","gid":' + b"9" * 40 + b',"group":"0","ranks":[0,1]}',
    b'{"ev":"group","gid":7,"group":"0","ranks":[0,true,"1",1e3]}',
    b'{"ev":"group","gid":8,"group":"0","ranks":' + b"[" + b"1," * 200_000 + b"1]}",
    b'{"ev":"group","gid":2,"group":"0","ranks":{}}',
    b'{"ev":"coll","rank":1,"group":"0","gid":99,"seq":2,"op":"all_reduce","shapes":[],"dtypes":[]}',
    b'{"ev":"coll","rank":1,"group":"0","gid":1,"group_ranks":[0,1],"seq":2,"op":"barrier"}',
    b'{"ev":"coll","rank":1,"group":"5","gid":1,"seq":2,"op":"barrier","shapes":[],"dtypes":[]}',
    b'{"ev":"coll","rank":1,"group":"0","gid":"1","seq":4,"op":"barrier","shapes":[],"dtypes":[]}',
)


@dataclass(frozen=True)
class Outcome:
    status: int | None  # None: raised or ran too long
    problem: str  # "" when the case passed


def build_case(rng: random.Random, folder: Path) -> list[str]:
    """Copy the seeds into `folder` (one or both, mixed in one folder or not) and mutate them;
    returns what was done, for the report of a failing case."""
    chosen = rng.choice(CHOICES)
    folder.mkdir(parents=True)
    for seed in chosen:
        for item in seed.iterdir():
            shutil.copy(item, folder / item.name)
    done = []
    for _ in range(rng.randint(1, 4)):
        files = sorted(path for path in folder.iterdir() if path.is_file())
        if not files:
            break
        mutation = rng.choice(MUTATIONS)
        target = rng.choice(files)
        done.append(f"{mutation.__name__}({target.name})")
        mutation(rng, target)
    return done


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def _set_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines))


def replace_line(rng: random.Random, path: Path) -> None:
    lines = _lines(path)
    lines[rng.randrange(len(lines))] = rng.choice(RAW_LINES)
    _set_lines(path, lines)


def insert_line(rng: random.Random, path: Path) -> None:
    lines = _lines(path)
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(RAW_LINES))
    _set_lines(path, lines)


def shuffle_lines(rng: random.Random, path: Path) -> None:
    lines = _lines(path)
    rng.shuffle(lines)
    _set_lines(path, lines)


def duplicate_lines(rng: random.Random, path: Path) -> None:
    lines = _lines(path)
    _set_lines(path, lines + rng.sample(lines, k=min(len(lines), rng.randint(1, 5))))


def replace_field(rng: random.Random, path: Path) -> None:
    """One field of one JSON line (at any depth) set to a hostile value, or removed."""
    lines = _lines(path)
    index = rng.randrange(len(lines))
    try:
        row = json.loads(lines[index])
    except (ValueError, RecursionError):  # a line an earlier mutation broke
        return
    _mutate_value(rng, row)
    lines[index] = json.dumps(row).encode()
    _set_lines(path, lines)


def replace_dump_field(rng: random.Random, path: Path) -> None:
    """The same on a Flight Recorder dump (read with the same safe decoder the analyzer uses),
    written back as a protocol 2 pickle or as JSON."""
    from collcheck.runtime.fr_read import plain_dump

    try:
        dump = plain_dump(str(path))
    except Exception:
        return
    if dump is None:
        return
    for _ in range(rng.randint(1, 3)):
        _mutate_value(rng, dump)
    try:
        data = pickle.dumps(dump, protocol=2) if rng.random() < 0.7 else json.dumps(dump).encode()
    except (TypeError, ValueError):
        return
    path.write_bytes(data)


def lengthen_dump(rng: random.Random, path: Path) -> None:
    """A dump's entries repeated into a loop of a few hundred (sequence numbers and times going on),
    written as torch writes dumps: the decoder reads them as runs, which later mutations hit."""
    from collcheck.runtime.fr_read import plain_dump

    try:
        dump = plain_dump(str(path))
    except Exception:
        return
    entries = dump.get("entries") if isinstance(dump, dict) else None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        return
    longer = []
    for step in range(rng.randint(10, 50)):
        for entry in entries:
            again = dict(entry)
            for field in ("collective_seq_id", "record_id", "op_id", "time_created_ns"):
                if isinstance(again.get(field), int) and not isinstance(again.get(field), bool):
                    again[field] += step * len(entries) * (1 if field != "time_created_ns" else 1000)
            longer.append(again)
    dump["entries"] = longer
    try:
        path.write_bytes(_torch_pickle(dump))
    except (TypeError, ValueError, OverflowError, struct.error):
        return


def _torch_pickle(value: Any) -> bytes:
    """bench/flight_recorder_read.py's writer (as torch's pickler writes a dump)."""
    return bytes(_writer().torch_pickle(value))


@functools.cache
def _writer() -> Any:
    spec = importlib.util.spec_from_file_location(
        "flight_recorder_read", REPO / "bench" / "flight_recorder_read.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mutate_value(rng: random.Random, value: Any) -> None:
    """Walk down to a random dict or list inside `value` and replace or drop one element."""
    container = value
    for _ in range(rng.randint(0, 6)):
        children = _children(container)
        if not children:
            break
        key = rng.choice(children)
        if not isinstance(container[key], (dict, list)):
            break
        container = container[key]
    children = _children(container)
    if not children:
        return
    key = rng.choice(children)
    if isinstance(container, dict) and rng.random() < 0.2:
        del container[key]
    else:
        container[key] = copy.deepcopy(rng.choice(HOSTILE))  # never shared: it may be mutated next


def _children(container: Any) -> list[Any]:
    if isinstance(container, dict):
        return list(container)
    if isinstance(container, list):
        return list(range(len(container)))
    return []


def flip_bytes(rng: random.Random, path: Path) -> None:
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    path.write_bytes(bytes(data))


def truncate(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data) + 1)])


def empty(rng: random.Random, path: Path) -> None:
    path.write_bytes(b"")


def remove(rng: random.Random, path: Path) -> None:
    path.unlink()


def copy_as_other_rank(rng: random.Random, path: Path) -> None:
    name = rng.choice(["collcheck-rank7.jsonl", "collcheck-rank.jsonl", "collcheck-rank99999999999.jsonl"])
    if path.name != name:
        shutil.copy(path, path.parent / name)


def crafted_pickle(rng: random.Random, path: Path) -> None:
    """A dump-shaped pickle naming a global; unpickling it would exit this process."""
    payload = pickle.dumps({"entries": [_Exit()], "rank": 0}, protocol=rng.choice([2, 4, 5]))
    (path.parent / f"nccl_trace_rank_{rng.randrange(4)}").write_bytes(payload)


class _Exit:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os._exit, (99,))


def random_bytes(rng: random.Random, path: Path) -> None:
    path.write_bytes(rng.randbytes(rng.randint(1, 4096)))


MUTATIONS: tuple[Callable[[random.Random, Path], None], ...] = (
    replace_line,
    replace_line,
    insert_line,
    shuffle_lines,
    duplicate_lines,
    replace_field,
    replace_field,
    replace_field,
    replace_dump_field,
    replace_dump_field,
    lengthen_dump,
    lengthen_dump,
    flip_bytes,
    truncate,
    empty,
    remove,
    copy_as_other_rank,
    crafted_pickle,
    random_bytes,
)


class _TooLong(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _TooLong

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_case(folder: Path, output_format: str, limit_s: float) -> Outcome:
    """`collcheck trace FOLDER --format F` in this process, its output discarded."""
    from collcheck.cli import main

    sink = io.StringIO()
    try:
        with _time_limit(limit_s), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            status = main(["trace", str(folder), "--format", output_format])
    except _TooLong:
        return Outcome(None, f"ran past {limit_s:.0f} s")
    except Exception:
        return Outcome(None, traceback.format_exc(limit=-6))
    if "Traceback" in sink.getvalue():
        return Outcome(status, "printed a traceback")
    if status not in STATUSES:
        return Outcome(status, f"exit status {status} outside {sorted(STATUSES)}")
    return Outcome(status, "")


def fuzz(
    cases: int, seed: int, limit_s: float, keep: Path | None = None, budget_s: float | None = None
) -> tuple[int, list[str], dict[int, int]]:
    """Run up to `cases` cases (fewer if `budget_s` runs out); returns (cases run, failures, how
    often each exit status came up)."""
    rng = random.Random(seed)
    failures: list[str] = []
    statuses: dict[int, int] = {}
    started = time.monotonic()
    ran = 0
    with tempfile.TemporaryDirectory(prefix="collcheck-fuzz-") as scratch:
        for number in range(cases):
            if budget_s is not None and time.monotonic() - started > budget_s:
                break
            folder = Path(scratch) / str(number)
            steps = build_case(rng, folder)
            outcome = run_case(folder, rng.choice(FORMATS), limit_s)
            ran += 1
            if outcome.status is not None:
                statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
            if outcome.problem:
                failures.append(f"case {number} ({', '.join(steps)}): {outcome.problem}")
                if keep is not None:
                    shutil.copytree(folder, keep / str(number), dirs_exist_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
    return ran, failures, statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="Copy failing case folders here.")
    parser.add_argument("--case-limit-s", type=float, default=10.0)
    options = parser.parse_args(argv)
    started = time.monotonic()
    ran, failures, statuses = fuzz(options.cases, options.seed, options.case_limit_s, options.keep)
    seconds = time.monotonic() - started
    for failure in failures[:20]:
        print(failure)
    shown = ", ".join(f"{status}: {count}" for status, count in sorted(statuses.items()))
    print(f"{ran} cases in {seconds:.1f} s, {len(failures)} failed; exit statuses {shown}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
