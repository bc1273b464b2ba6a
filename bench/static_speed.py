"""Speed of `collcheck check` on the installed torch tree, against libcst parse-only, ruff and pylint.

    python bench/static_speed.py [--tree PATH] [--quick] [--jobs N] [--repeat 3] [--json out.json]
    python bench/static_speed.py --corpus vllm,sglang [--repeat 1]     (issue 26: large trees)

Measures, in one run, on a private copy of the tree (the `*.py` files of site-packages/torch, about
2,300 files; the installed torch is never touched) and on its `torch/distributed` subtree:

  1. libcst parse-only: read + `libcst.parse_module` of every `*.py` file, one process. libcst is
     not a collcheck dependency: it is used if this interpreter can import it, otherwise it is
     `pip install`ed into a throw-away venv under the temp dir (needs the network; the script says
     which it did);
  2. collcheck cold: empty cache folder, cache on (not `--no-cache`: cold runs also write entries);
  3. collcheck warm: same files, cache populated;
  4. warm, one file changed: a comment appended to one copied file, (a) a file the run's textual
     prefilter never selects and (b) a file that names a collective (`distributed_c10d.py`),
     which today enters the dependency digest of every cache key (on the whole tree only with
     `--all-changes`: it costs about another cold run);
  5. ruff (`check --isolated --select E9,F --no-cache`) and pylint (one check, `-j2`), when
     installed (skipped with a note otherwise; `--install-pylint` puts it in the temp venv).

Every tool runs as a subprocess of its real CLI, timed with `time.perf_counter`; collcheck writes
its JSON report to a file (`--format json -o ...`: rendering is included, printing to a terminal is
not) and the script reads its summary (files, findings, errors) back. Exit status 1 (findings) is
expected. Also recorded: the CPU seconds of each run (user+sys of the child processes and their
workers; less sensitive than wall time to other work on the machine), their ratio to libcst's
("cpu vs"), the load average before each run, and the fixed cost of a run on an empty folder.

Quick runs (warm, changed, ruff) are repeated `--repeat` times and the best is kept; cold runs
once (`--cold-repeat` to repeat it), libcst and pylint once. `--quick` measures only torch/distributed.

Goals (issue 5, "Fast"), checked at the end against the libcst parse-only time:
  torch/distributed: cold <= 1.0x parse-only, warm <= 0.05x;  whole torch tree: cold <= 0.3x.

`--corpus` (default `torch`: the above, unchanged) names the trees to measure: `torch` and/or
packages of bench/precision.py (vllm 0.34.0, 3,604 files; sglang 0.5.23), fetched at its pinned
version into the bench cache and copied like torch (speed_corpora.py). Every measurement above
runs there, and each collcheck run records its peak memory (process_memory.py: RSS summed over
the process and its `-j` workers, the largest process, PSS; `--rss` for torch too). Goals (issue
26), per tree: cold <= 0.3x parse-only, peak RSS (the tree's sum) <= 400 MB.
Not a test: exit status 0 even when a goal is missed (1 only when a measurement could not run).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from corpus import copy_python_files, python_files
from measured_checkout import compile_collcheck, source_state
from process_memory import Peak, children_cpu, timed_sampled
from speed_corpora import (
    CORPUS_COLD_GOAL,
    TORCH,
    check_memory_goals,
    corpus_packages,
    fetch_corpus,
    parse_corpora,
)

DISTRIBUTED = "distributed"
COMMUNICATING_FILE = "distributed/distributed_c10d.py"  # relative to the torch folder
GOALS = (  # (scope, measurement, at most this many times libcst parse-only)
    ("torch/distributed", "cold", 1.0),
    ("torch/distributed", "warm", 0.05),
    ("torch", "cold", 0.3),
)
LIBCST_WORKER = r"""
import json, sys, time
started = time.perf_counter()
import libcst
imported = time.perf_counter()
failed = []
paths = [line for line in open(sys.argv[1], encoding="utf-8").read().splitlines() if line]
parse_started = time.perf_counter()
for path in paths:
    with open(path, "rb") as stream:
        data = stream.read()
    try:
        libcst.parse_module(data)
    except Exception as error:  # noqa: BLE001 - counted, not fatal
        failed.append(f"{path}: {type(error).__name__}")
done = time.perf_counter()
try:
    from importlib.metadata import version
    libcst_version = version("libcst")
except Exception:  # noqa: BLE001
    libcst_version = "?"
import os
print("RESULT " + json.dumps({
    "files": len(paths), "failed": failed, "import_s": imported - started,
    "parse_s": done - parse_started, "version": libcst_version,
    "parser": os.environ.get("LIBCST_PARSER_TYPE", "default (native)"),
}))
"""


@dataclass
class Measurement:
    scope: str
    name: str
    seconds: float | None = None  # best wall time (perf_counter) over the repeats
    runs: list[float] = field(default_factory=list)
    cpu_seconds: float | None = None  # user+sys of the children, for the best run
    load: float | None = None  # 1-minute load average before the best run
    detail: str = ""
    note: str = ""
    peak_rss_mb: float | None = None  # of the best run: the largest sum of VmRSS over the process tree
    largest_process_mb: float | None = None  # of the best run: the largest VmRSS of one process
    peak_pss_mb: float | None = None  # of the best run: the largest sum of Pss over the process tree


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def timed(command: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None):
    """(wall seconds, child CPU seconds, completed process, load average before)."""
    load = os.getloadavg()[0]
    cpu_before = children_cpu()
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    wall = time.perf_counter() - started
    return wall, children_cpu() - cpu_before, completed, load


def find_tree(argument: str | None) -> Path:
    if argument:
        return Path(argument).resolve()
    spec = importlib.util.find_spec("torch")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed here; pass --tree PATH/TO/torch")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def tool(name: str, explicit: str | None = None) -> str | None:
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


# --- libcst ----------------------------------------------------------------------------------------


def libcst_python(work: Path, allow_install: bool) -> tuple[str | None, str]:
    """An interpreter that can import libcst, and how it was obtained."""
    if importlib.util.find_spec("libcst") is not None:
        return sys.executable, "libcst importable by this interpreter (already installed)"
    if not allow_install:
        return None, "libcst not importable and --no-install given"
    python = venv_with(work, ["libcst"])
    if python is None:
        return None, "libcst not importable and `pip install libcst` into a temp venv failed"
    return python, "libcst pip-installed into a throw-away venv under the temp dir"


def venv_with(work: Path, packages: list[str]) -> str | None:
    venv = work / "tools-venv"
    python = venv / "bin" / "python"
    try:
        if not python.exists():
            log(f"creating {venv}")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        log(f"pip install {' '.join(packages)} into {venv}")
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *packages],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as error:
        log(f"  failed: {error}")
        return None
    return str(python)


def measure_libcst(python: str, files: list[Path], work: Path, scope: str, timeout: float) -> Measurement:
    listing = work / f"libcst-files-{scope.replace('/', '_')}.txt"
    listing.write_text("\n".join(str(p) for p in files) + "\n", encoding="utf-8")
    wall, cpu, completed, load = timed([python, "-c", LIBCST_WORKER, str(listing)], work, timeout)
    line = next((x for x in completed.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return Measurement(scope, "libcst parse-only", note=f"failed: {completed.stderr.strip()[-300:]}")
    data = json.loads(line[len("RESULT ") :])
    failed = data["failed"]
    return Measurement(
        scope,
        "libcst parse-only",
        seconds=data["parse_s"],
        runs=[data["parse_s"]],
        cpu_seconds=cpu,
        load=load,
        detail=f"{data['files']} files, {len(failed)} parse failures; libcst {data['version']}, "
        f"parser {data['parser']}; process wall {wall:.2f} s (import {data['import_s']:.2f} s)",
        note="; ".join(failed[:3]),
    )


# --- collcheck -------------------------------------------------------------------------------------


class Collcheck:
    def __init__(
        self, executable: str, work: Path, jobs: int, timeout: float, sample_rss: bool = False
    ) -> None:
        self.executable = executable
        self.sample_rss = sample_rss  # sample the process tree's resident set (timed_sampled)
        self.last_peak: Peak | None = None
        self.work = work  # holds pyproject.toml and the cache folder
        self.jobs = jobs
        self.timeout = timeout
        self.cache = work / ".collcheck_cache"
        self.report = work / "report.json"

    def run_once(self, target: Path) -> tuple[float, float, float, str]:
        command = [self.executable, "check", "--format", "json", "-o", str(self.report), "-j", str(self.jobs)]
        self.report.unlink(missing_ok=True)
        if self.sample_rss:
            wall, cpu, completed, load, self.last_peak = timed_sampled(
                [*command, str(target)], self.work, self.timeout
            )
        else:
            wall, cpu, completed, load = timed([*command, str(target)], self.work, self.timeout)
        if completed.returncode not in (0, 1):
            raise RuntimeError(f"collcheck exited {completed.returncode}: {completed.stderr.strip()[-500:]}")
        summary = json.loads(self.report.read_text(encoding="utf-8"))["summary"]
        counts = f"files {summary['files']}, findings {summary['findings']}, errors {summary['errors']}"
        if self.last_peak is not None and self.sample_rss:
            counts += f"; {self.last_peak.describe()}"
        return wall, cpu, load, counts

    def clear_cache(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)

    def entries(self) -> int:
        return sum(1 for _ in self.cache.rglob("*.json")) if self.cache.exists() else 0


def announce(m: Measurement) -> Measurement:
    """Log a finished measurement at once, so that an interrupted run still leaves its figures."""
    seconds = "-" if m.seconds is None else f"{m.seconds:.2f} s"
    cpu = "-" if m.cpu_seconds is None else f"{m.cpu_seconds:.2f} s"
    load = "-" if m.load is None else f"{m.load:.2f}"
    log(f"  => {m.scope} | {m.name}: wall {seconds}, cpu {cpu}, load {load}; {m.detail} {m.note}".rstrip())
    return m


def best_of(scope: str, name: str, repeats: int, once, peaks: Collcheck | None = None) -> Measurement:
    """Run `once()` (-> wall, cpu, load, detail) `repeats` times and keep the fastest. With `peaks`
    (a Collcheck sampling the resident set), the best run's peak is kept too."""
    result = Measurement(scope, name)
    best = None
    for _ in range(repeats):
        wall, cpu, load, detail = once()
        result.runs.append(wall)
        peak = peaks.last_peak if peaks is not None and peaks.sample_rss else None
        if best is None or wall < best[0]:
            best = (wall, cpu, load, detail, peak)
    assert best is not None
    result.seconds, result.cpu_seconds, result.load, result.detail, peak = best
    if peak is not None:
        result.peak_rss_mb = round(peak.total_kb / 1024, 1)
        result.largest_process_mb = round(peak.largest_kb / 1024, 1)
        result.peak_pss_mb = round(peak.proportional_kb / 1024, 1)
    return result


def append_comment(path: Path, counter: list[int]) -> None:
    counter[0] += 1
    with path.open("a", encoding="utf-8") as stream:
        stream.write(f"\n# collcheck static_speed bench edit {counter[0]}\n")


def quiet_file(tree: Path, files: list[Path]) -> tuple[Path, str]:
    """A file the run's prefilter never selects (so it is in no other file's cache key).

    Uses collcheck's own prefilter and project index when importable; otherwise falls back to the
    smallest file, labelled as unverified."""
    try:
        from collcheck.api import _project
        from collcheck.catalog import load_catalog
        from collcheck.config import Settings

        project = _project(files, load_catalog(), Settings(cache=False))
        candidates = []
        for path in files:
            real = os.path.realpath(path)
            if not project.indexed(real) or real in project.selected:
                continue
            size = path.stat().st_size
            candidates.append((abs(size - 4000), str(path), path))  # a mid-sized file
        if candidates:
            chosen = min(candidates)[2]
            share = f"{len(candidates)} of {len(files)} files are not selected by it"
            return chosen, f"not selected by the prefilter ({share})"
        return min(files, key=lambda p: p.stat().st_size), "every file passes the prefilter; smallest file"
    except Exception as error:  # the bench must not depend on internals
        return min(files, key=lambda p: p.stat().st_size), f"smallest file (prefilter not checked: {error})"


def measure_collcheck(
    cc: Collcheck, scope: str, target: Path, tree_copy: Path, files: list[Path], args
) -> list[Measurement]:
    results: list[Measurement] = []
    counter = [0]

    def cold_once():
        cc.clear_cache()
        wall, cpu, load, counts = cc.run_once(target)
        return wall, cpu, load, f"{counts}; {cc.entries()} cache entries written"

    empty = cc.work / "empty"
    empty.mkdir(exist_ok=True)
    log(f"[{scope}] collcheck on an empty folder")
    fixed = best_of(scope, "collcheck, empty folder", args.repeat, lambda: cc.run_once(empty), cc)
    fixed.note = "fixed cost of a run: interpreter, imports, settings, catalog, report"
    results.append(announce(fixed))
    log(f"[{scope}] collcheck cold")
    results.append(announce(best_of(scope, "collcheck cold", args.cold_repeat, cold_once, cc)))

    def warm_once():
        before = cc.entries()
        wall, cpu, load, counts = cc.run_once(target)
        written = cc.entries() - before
        return wall, cpu, load, counts + (f"; NOT WARM: {written} new cache entries" if written else "")

    log(f"[{scope}] collcheck warm")
    results.append(announce(best_of(scope, "collcheck warm", args.repeat, warm_once, cc)))

    quiet, why = quiet_file(tree_copy, files)
    communicating = tree_copy / COMMUNICATING_FILE
    variants = [("warm, 1 quiet file changed", quiet, why, args.repeat)]
    if scope == "torch/distributed" or args.all_changes:  # on the whole tree this is another cold run
        variants.append(("warm, distributed_c10d.py changed", communicating, "names collectives", 1))
    for label, path, why_path, repeats in variants:
        if not path.exists():
            results.append(Measurement(scope, label, note=f"{path} not in the tree"))
            continue
        original = path.read_bytes()

        def changed_once(path=path):
            cc.run_once(target)  # make sure the cache holds the current state of every file
            append_comment(path, counter)
            before = cc.entries()
            wall, cpu, load, counts = cc.run_once(target)
            return wall, cpu, load, f"{counts}; {cc.entries() - before} files re-analysed (new entries)"

        log(f"[{scope}] collcheck {label}")
        try:
            measurement = best_of(scope, label, repeats, changed_once, cc)
        finally:
            path.write_bytes(original)
        measurement.note = f"{path.relative_to(tree_copy.parent)}: {why_path}"
        results.append(announce(measurement))
    cc.run_once(target)  # leave the cache consistent with the restored files
    return results


# --- ruff and pylint -------------------------------------------------------------------------------


def measure_ruff(ruff: str | None, scope: str, target: Path, work: Path, args) -> Measurement:
    name = "ruff check E9,F"
    if ruff is None:
        return Measurement(scope, name, note="ruff not installed: skipped")
    command = [
        ruff,
        "check",
        "--isolated",
        "--select",
        "E9,F",
        "--no-cache",
        "--exit-zero",
        "-q",
        str(target),
    ]

    def once():
        wall, cpu, completed, load = timed(command, work, args.timeout)
        if completed.returncode != 0:
            raise RuntimeError(f"ruff exited {completed.returncode}: {completed.stderr[-300:]}")
        return wall, cpu, load, f"{len(completed.stdout.splitlines())} diagnostics"

    log(f"[{scope}] {name}")
    measurement = best_of(scope, name, args.repeat, once)
    measurement.note = "ruff is multi-threaded (all cores), no cache"
    return measurement


def pylint_command(work: Path, args) -> tuple[list[str] | None, str]:
    if args.pylint:
        return [args.pylint], "given with --pylint"
    found = tool("pylint")
    if found:
        return [found], "installed"
    if importlib.util.find_spec("pylint") is not None:
        return [sys.executable, "-m", "pylint"], "importable"
    if args.install_pylint:
        python = venv_with(work, ["pylint"])
        if python:
            return [python, "-m", "pylint"], "pip-installed into the temp venv"
    return None, "pylint not installed: skipped (--install-pylint to install it into a temp venv)"


def measure_pylint(command: list[str] | None, how: str, scope: str, target: Path, work: Path, args):
    name = "pylint -j2 (1 check)"
    if command is None:
        return Measurement(scope, name, note=how)
    full = [*command, "-j2", "--disable=all", "--enable=undefined-variable", "--score=n", "-sn", str(target)]
    log(f"[{scope}] {name}")
    try:
        wall, cpu, completed, load = timed(full, work, args.pylint_timeout)
    except subprocess.TimeoutExpired:
        return Measurement(scope, name, note=f"{how}; did not finish within {args.pylint_timeout:.0f} s")
    lines = [x for x in completed.stdout.splitlines() if ": E0602" in x or "undefined-variable" in x]
    return Measurement(
        scope, name, wall, [wall], cpu, load, f"{len(lines)} messages, exit {completed.returncode}", how
    )


# --- report ----------------------------------------------------------------------------------------


def ratio(measurement: Measurement, baseline: Measurement | None) -> str:
    if measurement.seconds is None or baseline is None or not baseline.seconds:
        return "-"
    return f"{measurement.seconds / baseline.seconds:.3f}x"


def cpu_ratio(measurement: Measurement, baseline: Measurement | None) -> str:
    if measurement.cpu_seconds is None or baseline is None or not baseline.cpu_seconds:
        return "-"
    return f"{measurement.cpu_seconds / baseline.cpu_seconds:.3f}x"


def print_table(results: list[Measurement]) -> None:
    scopes = list(dict.fromkeys(m.scope for m in results))
    header = (
        f"{'measurement':36} {'wall s':>9} {'vs parse':>9} {'cpu s':>8} {'cpu vs':>8} {'load':>5}  details"
    )
    for scope in scopes:
        rows = [m for m in results if m.scope == scope]
        baseline = next((m for m in rows if m.name == "libcst parse-only" and m.seconds), None)
        print(f"\n== {scope} ==")
        print(header)
        for m in rows:
            wall = f"{m.seconds:9.2f}" if m.seconds is not None else f"{'-':>9}"
            cpu = f"{m.cpu_seconds:8.2f}" if m.cpu_seconds is not None else f"{'-':>8}"
            load = f"{m.load:5.2f}" if m.load is not None else f"{'-':>5}"
            ratios = f"{ratio(m, baseline):>9} {cpu} {cpu_ratio(m, baseline):>8}"
            print(f"{m.name:36} {wall} {ratios} {load}  {m.detail}")
            if len(m.runs) > 1:
                print(f"{'':36} runs: {', '.join(f'{r:.2f}' for r in m.runs)}")
            if m.note:
                print(f"{'':36} note: {m.note}")


def check_goals(
    results: list[Measurement], goals: tuple[tuple[str, str, float], ...] = GOALS, issue: str = "issue 5"
) -> list[dict]:
    verdicts = []
    for scope, name, limit in goals:
        baseline = next(
            (m for m in results if m.scope == scope and m.name == "libcst parse-only" and m.seconds), None
        )
        measured = next((m for m in results if m.scope == scope and m.name == f"collcheck {name}"), None)
        if baseline is None or measured is None or measured.seconds is None:
            verdicts.append({"goal": f"{scope} {name} <= {limit}x", "status": "not measured"})
            continue
        value = measured.seconds / baseline.seconds
        verdicts.append(
            {
                "goal": f"{scope} {name} <= {limit}x parse-only",
                "ratio": round(value, 4),
                "seconds": round(measured.seconds, 3),
                "budget_s": round(limit * baseline.seconds, 3),
                "status": "PASS" if value <= limit else "MISS",
            }
        )
    print(f"\n== goals ({issue}) ==")
    for verdict in verdicts:
        if "ratio" in verdict:
            print(
                f"{verdict['status']:5} {verdict['goal']:44} measured {verdict['ratio']:.3f}x "
                f"({verdict['seconds']:.2f} s, budget {verdict['budget_s']:.2f} s)"
            )
        else:
            print(f"{'-':5} {verdict['goal']:44} {verdict['status']}")
    return verdicts


# --- main ------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", help="the torch package folder (default: the installed one)")
    parser.add_argument("--quick", action="store_true", help="only the torch/distributed subtree")
    parser.add_argument(
        "--corpus",
        default=TORCH,
        help="trees to measure, comma separated: torch and/or packages of bench/precision.py (vllm,sglang)",
    )
    parser.add_argument("--rss", action="store_true", help="sample the peak RSS of the torch runs too")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="collcheck -j")
    parser.add_argument("--repeat", type=int, default=3, help="repeats of warm/changed/ruff runs")
    parser.add_argument("--cold-repeat", type=int, default=1, help="repeats of cold runs")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per tool run")
    parser.add_argument(
        "--all-changes", action="store_true", help="also change distributed_c10d.py on the whole tree"
    )
    parser.add_argument("--collcheck", help="collcheck executable (default: beside this python)")
    parser.add_argument("--ruff", help="ruff executable (default: beside this python, then PATH)")
    parser.add_argument("--pylint", help="pylint executable")
    parser.add_argument("--install-pylint", action="store_true", help="pip-install pylint if missing")
    parser.add_argument("--pylint-timeout", type=float, default=900)
    parser.add_argument("--no-install", action="store_true", help="never pip-install libcst")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument("--json", help="also write the results here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    specs = corpus_packages() if args.corpus != TORCH else {}
    try:
        corpora = parse_corpora(args.corpus, list(specs))
    except ValueError as error:
        parser.error(str(error))

    tree = find_tree(args.tree) if TORCH in corpora else None
    collcheck = tool("collcheck", args.collcheck)
    if collcheck is None:
        raise SystemExit("collcheck not found; pip install -e . or pass --collcheck")
    log(compile_collcheck(collcheck))
    work = Path(tempfile.mkdtemp(prefix="collcheck-static-speed-"))
    started = time.perf_counter()
    results: list[Measurement] = []
    sources: dict[str, str] = {}  # corpus -> the archive it was unpacked from
    status = 0
    try:
        (work / "pyproject.toml").write_text('[tool.collcheck]\ncache-dir = ".collcheck_cache"\n')
        python, libcst_how = libcst_python(work, not args.no_install)
        log(libcst_how)
        ruff = tool("ruff", args.ruff)
        pylint, pylint_how = pylint_command(work, args)
        # (scope, folder analysed, the copied tree, whether its collcheck runs sample the RSS)
        scopes: list[tuple[str, Path, Path, bool]] = []
        for corpus in corpora:
            if corpus == TORCH:
                assert tree is not None
                copy = work / "torch"
                log(f"copying the *.py files of {tree} to {copy}")
                count = copy_python_files(tree, copy)
                log(f"  {count} files")
                scopes.append(("torch/distributed", copy / DISTRIBUTED, copy, args.rss))
                if not args.quick:
                    scopes.append(("torch", copy, copy, args.rss))
                continue
            try:
                package, sources[corpus] = fetch_corpus(corpus, specs)
            except Exception as error:  # a corpus that cannot be fetched is reported, not fatal
                results.append(Measurement(corpus, "collcheck", note=f"not fetched: {error}"))
                status = 1
                continue
            copy = work / "corpora" / corpus / package.name
            log(f"copying the *.py files of {package} ({sources[corpus]}) to {copy}")
            log(f"  {copy_python_files(package, copy)} files")
            scopes.append((corpus, copy, copy, True))
        for scope, target, copy, sample_rss in scopes:
            cc = Collcheck(collcheck, work, args.jobs, args.timeout, sample_rss)
            files = python_files(target)
            log(f"[{scope}] {len(files)} files")
            if python is not None:
                log(f"[{scope}] libcst parse-only")
                results.append(announce(measure_libcst(python, files, work, scope, args.timeout)))
            else:
                results.append(Measurement(scope, "libcst parse-only", note=libcst_how))
            try:
                results.extend(measure_collcheck(cc, scope, target, copy, files, args))
            except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as error:
                results.append(Measurement(scope, "collcheck", note=f"failed: {error}"))
                status = 1
            results.append(announce(measure_ruff(ruff, scope, target, work, args)))
            results.append(announce(measure_pylint(pylint, pylint_how, scope, target, work, args)))
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    machine = {
        "collcheck_source": source_state(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_at_end": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tree": str(tree),
        "corpora": sources,
        "collcheck_jobs": args.jobs,
        "libcst": libcst_how,
        "total_bench_s": round(time.perf_counter() - started, 1),
    }
    trees = [f"tree {tree} (copied; {libcst_how})"] if tree is not None else [libcst_how]
    trees += [f"{name} from {source} (copied)" for name, source in sources.items()]
    print(
        f"collcheck static speed, {machine['date']}, {machine['cpus']} CPUs, python {machine['python']}, "
        f"collcheck -j {args.jobs}; {'; '.join(trees)}; "
        f"collcheck source {machine['collcheck_source']}"
    )
    print_table(results)
    verdicts = check_goals(results) if TORCH in corpora else []
    if sources:
        names = list(sources)
        corpus_goals = tuple((name, "cold", CORPUS_COLD_GOAL) for name in names)
        verdicts += check_goals(results, corpus_goals, "issue 26")
        verdicts += check_memory_goals(results, names)
    print(
        f"\nload average at the end: {', '.join(f'{x:.2f}' for x in machine['load_at_end'])}; "
        f"bench took {machine['total_bench_s']:.0f} s"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"machine": machine, "results": [m.__dict__ for m in results], "goals": verdicts}, indent=2
            ),
            encoding="utf-8",
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
