"""Fuzz `collcheck check` and `collcheck estimate` with mutated inputs: no traceback, no hang.

    python bench/fuzz_static.py [--cases 2000] [--seed 1] [--timeout 60] [--file-timeout 5]
                                [--subprocess-every 50] [--keep DIR] [--json out.json]

Seeds are the repository's own fixtures: every `fixtures/**/*.py` program and every
`fixtures/models/*.json` model config. Each case applies one mutation to one seed:

  sources: byte flips, truncation, deep nesting (nested `if`s, parentheses, lists, calls around a
           collective), huge literals (integers past the digit limit, megabyte strings, long lists),
           random token deletion, a chunk of another fixture spliced in, NUL/undecodable bytes;
  configs: byte flips, truncation, UTF-16 re-encoding, deep nesting, a field set to a hostile value
           (0, negative, float, bool, string, list, 10**300, a 5000-digit literal), a field
           removed, a non-object document.

A source case runs `collcheck check --no-cache --format json -j 1 --file-timeout F FILE`, a config
case `collcheck estimate --model FILE --seq-len 4096`, both in this process through
`collcheck.cli.main` (an exception escaping `main` is a failure); every `--subprocess-every`-th case
also runs as a real `python -m collcheck` subprocess (a traceback on stderr is a failure). A case is
a failure when its exit status is not 0/1 (sources) or 0/1/2 (configs), when a source's report is
not valid JSON, or when it runs past `--timeout` seconds. A hang in this process is caught by
`faulthandler` (it prints every thread's stack and exits 3, after the case's name was printed).

The test suite (`tests/test_fuzz_static.py`) runs a few dozen cases of the same generator with a
fixed seed; this script is the soak version. Exit status: 0 when every case passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
COLLECTIVE = "import torch.distributed as dist\n"


@dataclass(frozen=True)
class Case:
    kind: str  # "source" or "config"
    seed: str  # the fixture it was made from
    mutation: str
    data: bytes

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.mutation}:{self.seed}"


@dataclass(frozen=True)
class Outcome:
    case: Case
    code: int | None  # None: it did not finish
    seconds: float
    problem: str | None  # None: passed


# --- seeds ---------------------------------------------------------------------------------------


def source_seeds() -> list[Path]:
    return sorted(path for path in FIXTURES.rglob("*.py") if path.stat().st_size < 64_000)


def config_seeds() -> list[Path]:
    return sorted((FIXTURES / "models").glob("*.json"))


# --- source mutations ----------------------------------------------------------------------------


def _flip_bytes(data: bytes, rnd: random.Random) -> bytes:
    buffer = bytearray(data or b"\n")
    for _ in range(rnd.randint(1, 8)):
        buffer[rnd.randrange(len(buffer))] = rnd.randrange(256)
    return bytes(buffer)


def _truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[: rnd.randrange(len(data) + 1)]


def _nest(data: bytes, rnd: random.Random) -> bytes:
    depth = rnd.choice([30, 100, 400, 2000, 10_000])
    style = rnd.choice(["if", "paren", "list", "call"])
    if style == "if":
        lines = [f"{' ' * level}if rank == {level}:" for level in range(min(depth, 400))]
        body = " " * len(lines) + "dist.barrier()"
        nested = "def f(rank):\n" + "\n".join(" " + line for line in [*lines, body])
    elif style == "paren":
        nested = "x = " + "(" * depth + "rank" + ")" * depth + "\ndist.broadcast(t, src=x)"
    elif style == "list":
        nested = "x = " + "[" * depth + "]" * depth + "\ndist.all_reduce(x)"
    else:
        nested = "dist.all_reduce(" + "f(" * depth + "t" + ")" * depth + ")"
    return data + b"\n" + (COLLECTIVE + nested + "\n").encode()


def _huge_literal(data: bytes, rnd: random.Random) -> bytes:
    choice = rnd.choice(["int", "string", "list", "line"])
    if choice == "int":
        literal = "x = 1" + "0" * rnd.choice([4000, 5000, 100_000])
    elif choice == "string":
        literal = "x = '" + "a" * rnd.choice([100_000, 2_000_000]) + "'"
    elif choice == "list":
        literal = "x = [" + "1, " * rnd.choice([10_000, 200_000]) + "]"
    else:
        literal = "dist.all_reduce(t)  # " + "#" * 1_000_000
    lines = data.split(b"\n")
    lines.insert(rnd.randrange(len(lines) + 1), literal.encode())
    return b"\n".join(lines)


_PIECES = re.compile(rb"\w+|\s+|.", re.DOTALL)


def _delete_tokens(data: bytes, rnd: random.Random) -> bytes:
    pieces = _PIECES.findall(data)
    words = [index for index, piece in enumerate(pieces) if not piece.isspace()]
    for index in rnd.sample(words, min(len(words), rnd.randint(1, 6))):
        pieces[index] = b""
    return b"".join(pieces)


def _splice(data: bytes, rnd: random.Random) -> bytes:
    other = rnd.choice(source_seeds()).read_bytes()
    start = rnd.randrange(len(other) + 1)
    chunk = other[start : start + rnd.randint(1, 400)]
    at = rnd.randrange(len(data) + 1)
    return data[:at] + chunk + data[at:]


def _bad_bytes(data: bytes, rnd: random.Random) -> bytes:
    at = rnd.randrange(len(data) + 1)
    return data[:at] + rnd.choice([b"\x00", b"\xff\xfe", b"\xed\xa0\x80", b"\r", b"\x0c"]) + data[at:]


SOURCE_MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip": _flip_bytes,
    "truncate": _truncate,
    "nest": _nest,
    "huge": _huge_literal,
    "delete": _delete_tokens,
    "splice": _splice,
    "bytes": _bad_bytes,
}

# --- config mutations ----------------------------------------------------------------------------

HOSTILE_VALUES: list[Any] = [0, -1, 1.5, True, None, "8", [], {}, [1], 10**300, -(10**300), 2**63]
FIELDS = [
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "max_position_embeddings",
    "sliding_window",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "torch_dtype",
    "text_config",
    "use_sliding_window",
]


def _config_field(data: bytes, rnd: random.Random) -> bytes:
    config = json.loads(data)
    for _ in range(rnd.randint(1, 3)):
        field = rnd.choice(FIELDS)
        if rnd.random() < 0.2:
            config.pop(field, None)
        else:
            config[field] = rnd.choice(HOSTILE_VALUES)
    return json.dumps(config).encode()


def _config_digits(data: bytes, rnd: random.Random) -> bytes:
    config = json.loads(data)
    config[rnd.choice(FIELDS)] = 0
    return json.dumps(config).replace(": 0", ": 1" + "0" * 5000, 1).encode()


def _config_nest(data: bytes, rnd: random.Random) -> bytes:
    depth = rnd.choice([100, 5000, 100_000])
    return b'{"text_config": ' + b"[" * depth + b"]" * depth + b"}"


def _config_utf16(data: bytes, rnd: random.Random) -> bytes:
    return data.decode("utf-8").encode(rnd.choice(["utf-16", "utf-16-le", "utf-32"]))


def _config_document(data: bytes, rnd: random.Random) -> bytes:
    return rnd.choice([b"[]", b"null", b'"x"', b"3", b"", b"[" + data + b"]", b"NaN"])


CONFIG_MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip": _flip_bytes,
    "truncate": _truncate,
    "field": _config_field,
    "digits": _config_digits,
    "nest": _config_nest,
    "utf16": _config_utf16,
    "document": _config_document,
}


def make_cases(count: int, seed: int, config_share: float = 0.3) -> list[Case]:
    """`count` cases, the same ones for the same seed."""
    rnd = random.Random(seed)
    sources, configs = source_seeds(), config_seeds()
    cases = []
    for _ in range(count):
        if rnd.random() < config_share:
            path, kind, mutations = rnd.choice(configs), "config", CONFIG_MUTATIONS
        else:
            path, kind, mutations = rnd.choice(sources), "source", SOURCE_MUTATIONS
        mutation = rnd.choice(sorted(mutations))
        data = mutations[mutation](path.read_bytes(), rnd)
        cases.append(Case(kind, path.relative_to(FIXTURES).as_posix(), mutation, data))
    return cases


def cases_per_mutation(per: int, seed: int) -> list[Case]:
    """`per` cases of every mutation, sources and configs (the test suite's fixed sample)."""
    rnd = random.Random(seed)
    sources, configs = source_seeds(), config_seeds()
    cases = []
    for kind, seeds, mutations in (
        ("source", sources, SOURCE_MUTATIONS),
        ("config", configs, CONFIG_MUTATIONS),
    ):
        for mutation in sorted(mutations):
            for _ in range(per):
                path = rnd.choice(seeds)
                data = mutations[mutation](path.read_bytes(), rnd)
                cases.append(Case(kind, path.relative_to(FIXTURES).as_posix(), mutation, data))
    return cases


# --- running -------------------------------------------------------------------------------------


def _argv(case: Case, path: Path, file_timeout: float) -> list[str]:
    if case.kind == "config":
        return ["estimate", "--model", str(path), "--seq-len", "4096"]
    return [
        "check",
        "--no-cache",
        "--format",
        "json",
        "-j",
        "1",
        "--file-timeout",
        str(file_timeout),
        str(path),
    ]


def _write(case: Case, folder: Path, index: int) -> Path:
    path = folder / f"case_{index:05d}{'.json' if case.kind == 'config' else '.py'}"
    path.write_bytes(case.data)
    return path


def _judge(case: Case, code: int, stdout: str, seconds: float, timeout: float) -> str | None:
    allowed = (0, 1, 2) if case.kind == "config" else (0, 1)
    if code not in allowed:
        return f"exit status {code}"
    if seconds > timeout:
        return f"took {seconds:.1f} s (limit {timeout:g} s)"
    if case.kind == "source":
        try:
            json.loads(stdout)
        except ValueError:
            return "the JSON report does not parse"
    return None


def run_in_process(case: Case, folder: Path, index: int, timeout: float, file_timeout: float) -> Outcome:
    """Through `collcheck.cli.main` in this process: an escaping exception is a failure."""
    from collcheck.cli import main

    path = _write(case, folder, index)
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(_argv(case, path, file_timeout))
    except BaseException:
        seconds = time.monotonic() - started
        return Outcome(case, None, seconds, "exception: " + traceback.format_exc(limit=-4))
    seconds = time.monotonic() - started
    return Outcome(case, code, seconds, _judge(case, code, out.getvalue(), seconds, timeout))


def run_in_subprocess(case: Case, folder: Path, index: int, timeout: float, file_timeout: float) -> Outcome:
    """As a user runs it: `python -m collcheck`, killed after `timeout` seconds."""
    path = _write(case, folder, index)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.monotonic()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "collcheck", *_argv(case, path, file_timeout)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=folder,
        )
    except subprocess.TimeoutExpired:
        return Outcome(case, None, timeout, f"no exit after {timeout:g} s")
    seconds = time.monotonic() - started
    if "Traceback (most recent call last)" in completed.stderr:
        return Outcome(case, completed.returncode, seconds, "traceback: " + completed.stderr[-2000:])
    problem = _judge(case, completed.returncode, completed.stdout, seconds, timeout)
    return Outcome(case, completed.returncode, seconds, problem)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=2000, help="how many mutated inputs (default 2000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take (default 60)")
    parser.add_argument(
        "--file-timeout", type=float, default=5.0, help="collcheck's --file-timeout (default 5)"
    )
    parser.add_argument(
        "--subprocess-every", type=int, default=50, help="also run every Nth case as a subprocess"
    )
    parser.add_argument("--keep", type=Path, help="write every case's input into this folder and keep it")
    parser.add_argument("--json", type=Path, help="write the outcome table here")
    return parser.parse_args(argv)


@contextlib.contextmanager
def _hang_guard(seconds: float) -> Iterator[None]:
    """A hang in this process: print every stack and stop, rather than wait for ever."""
    stream = sys.__stderr__
    try:
        faulthandler.dump_traceback_later(seconds, exit=True, file=stream)  # type: ignore[arg-type]
    except (ValueError, AttributeError, io.UnsupportedOperation):  # no real stderr to write to
        yield
        return
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    cases = make_cases(args.cases, args.seed)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="collcheck-fuzz-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        for index, case in enumerate(cases):
            print(f"[{index + 1}/{len(cases)}] {case.name}", flush=True)
            with _hang_guard(args.timeout * 2 + 30):
                outcomes.append(run_in_process(case, folder, index, args.timeout, args.file_timeout))
            if args.subprocess_every and index % args.subprocess_every == 0:
                outcomes.append(run_in_subprocess(case, folder, index, args.timeout, args.file_timeout))
    failures = [outcome for outcome in outcomes if outcome.problem]
    _summary(outcomes, failures)
    if args.json:
        table = [
            {"case": o.case.name, "code": o.code, "seconds": round(o.seconds, 3), "problem": o.problem}
            for o in outcomes
        ]
        args.json.write_text(json.dumps(table, indent=1))
    return 1 if failures else 0


def _summary(outcomes: list[Outcome], failures: list[Outcome]) -> None:
    codes = Counter(outcome.code for outcome in outcomes)
    slowest = max(outcomes, key=lambda outcome: outcome.seconds, default=None)
    statuses = dict(sorted(codes.items(), key=str))
    print(f"\n{len(outcomes)} runs, {len(failures)} failures; exit statuses {statuses}")
    if slowest is not None:
        print(f"slowest: {slowest.case.name} {slowest.seconds:.2f} s")
    for failure in failures:
        print(f"FAIL {failure.case.name}: {failure.problem}")


if __name__ == "__main__":
    sys.exit(main())
