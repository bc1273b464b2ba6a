"""Paths in, results out. Never prints, never exits: the CLI and the tests both call this."""

from __future__ import annotations

import fnmatch
import gc
import os
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from collcheck.cache import cached_analyze, load_manifest, store_manifest
from collcheck.cache_guard import cache_folder
from collcheck.catalog import Catalog, settings_catalog, settings_catalog_fingerprint
from collcheck.config import Settings
from collcheck.findings import FileError, FileResult, RunResult
from collcheck.lines import with_newlines
from collcheck.source import MAX_SOURCE_BYTES, SourceFile, read_source, real_path
from collcheck.static.project import Project, index_key

MAX_FILE_BYTES = MAX_SOURCE_BYTES


@lru_cache(maxsize=32)
def _exclusion_matchers(patterns: tuple[str, ...]) -> tuple[re.Pattern[str] | None, tuple[str, ...]]:
    """Name patterns (`build`, `*.pyc`) as one regex; path patterns (`legacy/*`) kept apart."""
    names = [p for p in patterns if "/" not in p]
    paths = tuple(p for p in patterns if "/" in p)
    regex = re.compile("|".join(fnmatch.translate(p) for p in names)) if names else None
    return regex, paths


def _is_excluded(path: Path, patterns: Sequence[str], root: str = ".") -> bool:
    by_name, by_path = _exclusion_matchers(tuple(patterns))
    if by_name is not None and by_name.match(path.name):
        return True
    if not by_path:
        return False
    candidates = (str(path), _relative(str(path), root))
    return any(fnmatch.fnmatch(candidate, pattern) for pattern in by_path for candidate in candidates)


def _walk(
    folder: Path,
    patterns: Sequence[str],
    seen: set[tuple[int, int]],
    root: str = ".",
    visited: list[str] | None = None,
) -> Iterable[Path]:
    if visited is not None:
        visited.append(str(folder))
    try:
        stat = folder.stat()
    except OSError:
        return
    key = (stat.st_dev, stat.st_ino)
    if key in seen:  # a symlink loop, or the same folder reached twice
        return
    seen.add(key)
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        child = Path(entry.path)
        if _is_excluded(child, patterns, root):
            continue
        try:
            if entry.is_dir():
                if (child / "pyvenv.cfg").exists():  # any virtualenv, whatever its name
                    if visited is not None:  # it stops being one when that file goes
                        visited.append(str(child))
                    continue
                yield from _walk(child, patterns, seen, root, visited)
            elif entry.name.endswith(".py"):
                yield child
        except OSError:  # a symlink loop or a vanished entry: a .py name is reported, others skipped
            if entry.name.endswith(".py"):
                yield child


def _gitignored(paths: list[Path]) -> set[Path]:
    """Paths git would ignore; empty when git or a repository is not there."""
    import subprocess

    if not paths:
        return set()
    try:
        completed = subprocess.run(
            ["git", "check-ignore", "--stdin", "-z"],
            input="\0".join(str(path) for path in paths).encode(),
            capture_output=True,
            timeout=20,
            cwd=str(paths[0].parent if paths[0].is_file() else paths[0]),
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if completed.returncode not in (0, 1):
        return set()
    return {Path(item) for item in completed.stdout.decode(errors="replace").split("\0") if item}


def collect_files(paths: Sequence[Path], settings: Settings, visited: list[str] | None = None) -> list[Path]:
    """Files named explicitly are always taken; folders recurse into *.py minus excludes (the
    folders scanned are added to `visited`)."""
    patterns = (*settings.exclude, *settings.extend_exclude)
    found: list[Path] = []
    walked: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        files = list(_walk(path, patterns, seen, settings.root, visited))
        # A folder named on the command line is checked even if git ignores it (a venv's
        # site-packages, a vendored tree); .gitignore only prunes what lies inside it.
        if settings.respect_gitignore and files and not _gitignored([path]):
            ignored = _gitignored(files)
            files = [file for file in files if file not in ignored]
        walked.extend(files)
    unique = dict.fromkeys([*found, *walked])
    return list(unique)


def _relative(path: str, root: str) -> str:
    """A path as written in pyproject.toml: relative to the folder holding it."""
    try:
        return os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:  # another drive (Windows)
        return path


def _per_file_ignored(path: str, settings: Settings) -> tuple[str, ...]:
    codes: list[str] = []
    candidates = (path, _relative(path, settings.root), Path(path).name)
    for pattern, pattern_codes in settings.per_file_ignores:
        if any(fnmatch.fnmatch(candidate, pattern) for candidate in candidates):
            codes.extend(pattern_codes)
    return tuple(codes)


def _filter(result: FileResult, settings: Settings) -> FileResult:
    if not result.findings:
        return result  # a clean file never loads the rule registry (and the engine types it imports)
    from collcheck.checks import rule_selection

    selection = rule_selection(settings)
    ignored = _per_file_ignored(result.path, settings)
    result.findings = [
        finding
        for finding in result.findings
        if selection.enabled(finding.code) and not any(finding.code.startswith(code) for code in ignored)
    ]
    return result


def analyze_file(
    path: str,
    settings: Settings,
    catalog: Catalog | None = None,
    project: Project | None = None,
    *,
    lookup_only: bool = False,
) -> FileResult:
    """One file's result, from the cache when possible (with `lookup_only`, None on a miss)."""
    catalog = catalog or settings_catalog(settings)
    resolved = catalog

    def compute() -> FileResult:
        source = read_source(Path(path), MAX_FILE_BYTES)
        if isinstance(source, FileError):
            return FileResult(path=path, error=source)
        return _analyze_in_budget(source, resolved, settings, project)

    # Another file may change this file's verdict: the index's names are in the key, and the
    # files the answer read are checked against their digests when it is read back.
    index = "" if project is None else index_key(project)
    still_reads = None if project is None else project.still_reads
    result = cached_analyze(
        path,
        settings,
        catalog.fingerprint,
        compute,
        dependency_digest=index,
        still_reads=still_reads,
        lookup_only=lookup_only,
    )
    return _filter(result, settings) if result is not None else None  # type: ignore[return-value]


def _analyze_in_budget(
    source: SourceFile, catalog: Catalog, settings: Settings, project: Project | None = None
) -> FileResult:
    """The engine's result for one source, or an error once its safety clock (`settings.file_timeout`)
    is spent; the work budgets inside the engine normally end a file long before."""
    # Imported only on a cache miss, so that a warm run never loads z3, the engine or the rules.
    from collcheck.classify import classifier
    from collcheck.static.budget import BudgetExceeded, file_budget
    from collcheck.static.engine import analyze_source
    from collcheck.static.retained import release_between_files

    release_between_files()
    try:
        with file_budget(settings.file_timeout):
            return analyze_source(source, catalog, settings, project, rules=classifier(settings))
    except BudgetExceeded as spent:
        return FileResult(path=source.path, error=budget_error(source.path, spent.seconds))


def budget_error(path: str, seconds: float) -> FileError:
    return FileError(
        path,
        f"analysis stopped: over the per-file safety clock of {seconds:g} s, although the work budgets "
        "bound it (a machine far slower than usual, or a file they do not bound: raise "
        "`file-timeout` / --file-timeout)",
        transient=True,
    )


def analyze_text(text: str, path: str = "<string>", settings: Settings | None = None) -> FileResult:
    """Analyse source text directly (tests, editors), within the same per-file budget."""
    settings = settings or Settings()
    catalog = settings_catalog(settings)
    source = SourceFile(path=path, text=with_newlines(text))
    return _filter(_analyze_in_budget(source, catalog, settings), settings)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's total)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return int(counter() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def worker_count(requested: int) -> int:
    """`jobs` from the settings, never more than the usable cores: a repository's pyproject must
    not be able to start hundreds of processes (0: all usable cores)."""
    cores = usable_cores()
    return cores if requested <= 0 else min(requested, cores)


_WORKER: dict[str, object] = {}


def _start_worker(settings: Settings, project: Project | None) -> None:
    """Each worker process receives the settings and the index once, not with every file."""
    _WORKER["settings"] = settings
    _WORKER["project"] = project
    _collect_garbage_less_often()


# Syntax trees and symbolic terms are many small objects that live until a file is done: with
# the default thresholds the cycle collector runs constantly over them (measured: a third of the
# analysis time on the torch tree) while finding next to nothing to free. Most die by reference
# count when their file is done; a young generation of a million objects lets them die before a
# scan sees them (at 50,000, a worker spent about a seventh of its time in the collector on
# torch/distributed), and bounds what cyclic garbage waits for one (measured: 20-30 MiB a worker).
_GC_THRESHOLDS = (1_000_000, 10, 10)


def _collect_garbage_less_often() -> tuple[int, int, int]:
    previous = gc.get_threshold()
    gc.set_threshold(*_GC_THRESHOLDS)
    return previous


def _analyze_job(path: str) -> FileResult:
    settings = _WORKER["settings"]
    project = _WORKER["project"]
    assert isinstance(settings, Settings)
    return analyze_file(path, settings, project=project if isinstance(project, Project) else None)


def _project(
    files: list[Path], fingerprint: str, settings: Settings, jobs: int = 1, checked: list[Path] | None = None
) -> Project:
    """The run's cross-file index; on a warm run it comes from the cache when no file changed
    (same paths, sizes and modification times), and after an edit only the edited files are read.
    `checked`: the files a partial run checks, when `files` also holds the project around them."""
    from collcheck.cache import load_project, store_project
    from collcheck.index_facts import read_facts
    from collcheck.static.project import build_project, module_names, resolver_for

    if settings.cache:
        cached = load_project(files, fingerprint, settings)
        if cached is not None:
            return cached
    catalog = settings_catalog(settings)
    paths = list(dict.fromkeys(str(real_path(path)) for path in files))
    modules = module_names(paths)
    reached_from = None if checked is None else [str(real_path(path)) for path in checked]
    # A partial run's reach and the index ask the same names of one resolver, which keeps answers.
    resolver = resolver_for(modules, paths) if reached_from is not None else None
    facts = read_facts(paths, catalog, settings, jobs, modules, reached_from, resolver)
    project = build_project(facts, modules, resolver)
    if settings.cache:
        store_project(files, catalog.fingerprint, settings, project)
    return project


PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(paths: Sequence[Path | str]) -> Path | None:
    """The nearest folder above the first path that holds a pyproject.toml or a .git."""
    if not paths:
        return None
    start = Path(os.path.abspath(paths[0]))
    for folder in [start, *start.parents] if start.is_dir() else start.parents:
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return None


def _inside_excluded_folder(path: Path, root: Path, settings: Settings) -> bool:
    patterns = [*settings.exclude, *settings.extend_exclude]
    return any(_is_excluded(folder, patterns, str(root)) for folder in path.parents if root in folder.parents)


def _index_files(paths: Sequence[Path | str], files: list[Path], settings: Settings) -> list[Path]:
    """What the cross-file index covers: the files checked and, when they are only part of a
    project (pre-commit passes the staged files), every file of the project around them, so that a
    helper or a rank constant defined in an unstaged file is followed as in a whole-tree run."""
    if not settings.project_context or not files:
        return files
    root = project_root(paths)
    if root is None or any(Path(os.path.abspath(p)) == root for p in paths):
        return files
    if _inside_excluded_folder(Path(os.path.abspath(paths[0])), root, settings):
        return files  # a venv or build folder inside a project: not that project's code
    around = _project_files(root, settings)
    checked = {str(real_path(path)) for path in files}
    others = [Path(path) for path, real in around.items() if real not in checked]
    if len(others) == len(around):
        return files  # the files are not part of that project (an excluded folder, a venv)
    return [*files, *others]


def _project_files(root: Path, settings: Settings) -> dict[str, str]:
    """Every file of the project at `root` with its real path; from the cache when no folder
    walked and no ignore file changed since the last walk (a warm partial run never walks).
    Text, not `Path`s: a warm run reads thousands of them and uses a few."""
    from collcheck.cache import load_walk, store_walk

    known = load_walk(settings, root)
    if known is not None:
        return known
    folders: list[str] = []
    files = {str(path): str(real_path(path)) for path in collect_files([root], settings, folders)}
    if settings.cache:
        # A cache folder inside the project changes with every run that writes: never a stamp.
        cache = os.path.realpath(cache_folder(settings))
        stamped = [
            f
            for f in folders
            if not (real := os.path.realpath(f)).startswith(cache + os.sep) and real != cache
        ]
        store_walk(settings, root, stamped, files)
    return files


def _size_or_zero(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # reported by the worker that reads it


def _ruled_out(project: Project, path: str) -> bool:
    return project.indexed(path) and path not in project.selected


def _quiet(name: str) -> FileResult:
    return FileResult(path=name)


def _with_environment(paths: Sequence[Path | str], settings: Settings, files: list[Path]) -> Settings:
    """The settings with the summaries of the installed packages the files import, when an
    environment is named or found (`environment.find_environment`). Without one, only the bundled
    summaries of the frameworks the files import (`bundled_summaries`: one listing, one search of
    each file's bytes)."""
    root = Path(settings.root) if settings.root != "." else project_root(paths)
    venv = root is not None and os.path.isfile(root / ".venv" / "pyvenv.cfg")
    if settings.python is None and not os.environ.get("VIRTUAL_ENV") and not venv:
        from collcheck.bundled_summaries import with_bundled_summaries

        return with_bundled_summaries(settings, root, files)
    from collcheck.environment import EnvironmentSource, find_environment
    from collcheck.package_summaries import with_package_summaries

    environment = find_environment(settings.python, EnvironmentSource.NAMED, root, None, paths)
    return settings if environment is None else with_package_summaries(settings, environment, root, files)


def check_paths(paths: Sequence[Path | str], settings: Settings | None = None) -> RunResult:
    settings = settings or Settings()
    previous = _collect_garbage_less_often()
    try:
        return _check_paths(paths, settings)
    finally:
        gc.set_threshold(*previous)


def _check_paths(paths: Sequence[Path | str], settings: Settings) -> RunResult:
    # Fails early (exit 2) on an unreadable catalog; parsed below only when a file is not answered
    # by the run manifest (whose entries exist only for catalogs that parsed).
    settings_catalog_fingerprint(settings)
    if settings.cache:
        cache_folder(settings)  # fail early (exit 2) on a cache folder behind a symbolic link
    files = collect_files([Path(p) for p in paths], settings)
    settings = _with_environment(paths, settings, files)
    fingerprint = settings_catalog_fingerprint(settings)
    missing = [
        FileResult(path=str(p), error=FileError(str(p), "no such file or folder"))
        for p in paths
        if not Path(p).exists()
    ]
    named = {Path(p) for p in paths}
    # Named paths that do not exist are already reported once above; walked dangling links or
    # loops are read (and reported) like any unreadable file.
    files = [f for f in files if f not in named or f.exists()]
    jobs = worker_count(settings.jobs)
    names = [str(path) for path in files]
    indexed = _index_files(paths, files, settings)
    partial = files if len(indexed) > len(files) else None  # the project around them is indexed too
    project = _project(indexed, fingerprint, settings, jobs, partial) if len(indexed) > 1 else None
    roots = sorted(str(real_path(p)) for p in paths)
    real = {name: str(real_path(name)) for name in names}
    index = index_key(project) if project else ""
    dependencies = dict.fromkeys(names, index)
    unchanged = load_manifest(
        settings, fingerprint, roots, dependencies, project.still_reads if project else None
    )
    answered = bool(names) and len(unchanged) == len(names)
    catalog = None if answered else settings_catalog(settings)
    # Files the index rules out are answered without reading them again; cache hits are answered
    # here; only the misses go to worker processes.
    hits = {
        name: unchanged.get(name)
        or (_quiet(name) if project and _ruled_out(project, real[name]) else None)
        or analyze_file(name, settings, catalog, project, lookup_only=True)
        for name in names
    }
    misses = [name for name in names if hits[name] is None]
    if jobs > 1 and len(misses) > 8:
        from collcheck.workers import Pool, answer_limit, run_in_workers

        # Largest first, one file a task: the longest file then starts at once instead of
        # last, and the workers finish together (sizes stand in for analysis times).
        order = sorted(misses, key=_size_or_zero, reverse=True)
        limit = answer_limit(settings.file_timeout)
        computed = run_in_workers(order, Pool(jobs, _analyze_job, _start_worker, (settings, project), limit))
    else:
        computed = {name: analyze_file(name, settings, catalog, project) for name in misses}
    results = [hits[name] or computed[name] for name in names]
    if not answered:  # else the manifest already says exactly this
        store_manifest(
            settings, fingerprint, roots, {r.path: (dependencies.get(r.path, ""), r) for r in results}
        )
    ordered = sorted([*missing, *results], key=lambda result: result.path)
    summaries = tuple(name for name, _ in settings.summary_documents)
    return RunResult(files=ordered, summaries=summaries, summary_notes=settings.summary_notes)
