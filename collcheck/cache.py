"""A content-keyed cache of per-file results in `.collcheck_cache/`.

The key is the sha256 of the file's bytes, its path (findings carry it), collcheck's identity
(its version and a stamp of its own source and data files, `engine_identity`: a changed engine
without a version bump must not serve old results), a
fingerprint of the settings that can change what the engine finds, the catalog fingerprint and a
`dependency_digest`: what every answer may read of the run's index as a whole
(`project.index_key`: the module table, the names that communicate). The other files an answer
was computed from are stored with it (`FileResult.reads`, recorded by static/reads.py) and
checked when it is read back (`still_reads`, the run's `Project.still_reads`): an edit re-checks
the files that read the edited file, and no others.

This module must stay light: a warm run imports it, json and hashlib, never z3, libcst or the
static engine. A corrupt or unreadable entry is a miss; a cache that cannot be written is skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collcheck import __version__

if TYPE_CHECKING:
    from collcheck.static.project import FileFacts, Project
from collcheck.cache_guard import cache_folder, read_entry, write_entry
from collcheck.config import Settings
from collcheck.findings import (
    Budget,
    BudgetCut,
    ConditionKind,
    Counterexample,
    FileError,
    FileResult,
    Finding,
    Location,
    RankValue,
    Reason,
    Severity,
    TraceStep,
    UnusedSuppression,
)
from collcheck.source import MAX_SOURCE_BYTES, FileRefused, read_regular_file

CACHE_FORMAT = 6  # bump when the stored layout changes; old entries then simply miss

# Settings that choose which files are read or how the run is scheduled, not what a file yields.
_KEY_IGNORED_SETTINGS = frozenset(
    {
        "jobs",
        "cache",
        "cache_dir",
        "exclude",
        "extend_exclude",
        "respect_gitignore",
        "root",
        "baseline",
        "file_timeout",
        "budget_exceeded",  # the exit code's policy: the cuts themselves are stored either way
        # What these change reaches the key through the catalog fingerprint.
        "python",
        "summaries",
        "summary_documents",
        "summary_notes",
    }
)


def engine_identity() -> str:
    """collcheck's version and a stamp of every file of the package and of its bundled data: an
    edited checkout or a reinstalled wheel gets fresh cache entries even when the version string
    did not move."""
    return f"{__version__}+{_engine_files_stamp()}"


@lru_cache(maxsize=1)
def _engine_files_stamp() -> str:
    package = Path(__file__).resolve().parent
    data = package / "rules" if (package / "rules").is_dir() else package.parent / "rules"
    return tree_stamp(((package, "*.py"), (data, "*")))


def tree_stamp(trees: tuple[tuple[Path, str], ...]) -> str:
    """A digest of each matching file's relative path, size and modification time. Stat only, no
    reading: this runs on every warm pre-commit call (about 200 files, a few milliseconds)."""
    digest = hashlib.sha256()
    for folder, pattern in trees:
        for path in sorted(folder.rglob(pattern)):
            try:
                stat = path.stat()
            except OSError:
                continue
            relative = path.relative_to(folder).as_posix()
            stamp = f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}\0"
            digest.update(stamp.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


def settings_fingerprint(settings: Settings) -> str:
    values = {
        item.name: getattr(settings, item.name)
        for item in dataclasses.fields(settings)
        if item.name not in _KEY_IGNORED_SETTINGS
    }
    text = json.dumps(values, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_key(
    content: bytes,
    path: str,
    settings: Settings,
    catalog_fingerprint: str,
    dependency_digest: str = "",
) -> str:
    digest = hashlib.sha256()
    for part in (
        f"collcheck-cache-{CACHE_FORMAT}",
        engine_identity(),
        path,
        settings_fingerprint(settings),
        catalog_fingerprint,
        dependency_digest,
    ):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(content)
    return digest.hexdigest()


# --- FileResult <-> JSON -------------------------------------------------------------------------


def _location_to_json(location: Location) -> dict[str, Any]:
    return dataclasses.asdict(location)


def _location_from_json(data: dict[str, Any]) -> Location:
    return Location(**data)


def _step_from_json(data: dict[str, Any]) -> TraceStep:
    return TraceStep(
        op=data["op"],
        path=data["path"],
        line=data["line"],
        chain=tuple(data.get("chain", ())),
        detail=data.get("detail", ""),
    )


def _counterexample_to_json(example: Counterexample) -> dict[str, Any]:
    return {
        "world_size": example.world_size,
        "ranks": [[rank, [step.to_json() for step in steps]] for rank, steps in example.ranks],
        "values": [list(pair) for pair in example.values],
        "why": [_reason_to_json(reason) for reason in example.why],
        "group": example.group,
        "local_ranks": [list(pair) for pair in example.local_ranks],
    }


def _reason_to_json(reason: Reason) -> dict[str, Any]:
    return {
        "condition": reason.condition,
        "path": reason.path,
        "line": reason.line,
        "kind": reason.kind.value,
        "column": reason.column,
        "ranks": [[item.rank, item.holds, [list(pair) for pair in item.reads]] for item in reason.ranks],
    }


def _reason_from_json(data: dict[str, Any]) -> Reason:
    return Reason(
        condition=str(data["condition"]),
        path=str(data["path"]),
        line=int(data["line"]),
        kind=ConditionKind(str(data["kind"])),  # an unknown kind: ValueError, the entry is a miss
        ranks=tuple(
            RankValue(int(rank), bool(holds), tuple((str(name), str(value)) for name, value in reads))
            for rank, holds, reads in data["ranks"]
        ),
        column=int(data.get("column", 0)),
    )


def _counterexample_from_json(data: dict[str, Any]) -> Counterexample:
    return Counterexample(
        world_size=data["world_size"],
        ranks=tuple(
            (int(rank), tuple(_step_from_json(step) for step in steps)) for rank, steps in data["ranks"]
        ),
        values=tuple((str(name), str(value)) for name, value in data["values"]),
        why=tuple(_reason_from_json(reason) for reason in data.get("why", ())),
        group=str(data.get("group", "")),
        local_ranks=tuple((int(rank), int(local)) for rank, local in data.get("local_ranks", ())),
    )


def _finding_to_json(finding: Finding) -> dict[str, Any]:
    example = finding.counterexample
    return {
        "code": finding.code,
        "severity": finding.severity.value,
        "location": _location_to_json(finding.location),
        "message_template": finding.message_template,
        "message_args": [list(pair) for pair in finding.message_args],
        "counterexample": None if example is None else _counterexample_to_json(example),
        "function": finding.function,
        "cause": None if finding.cause is None else _location_to_json(finding.cause),
    }


def _finding_from_json(data: dict[str, Any]) -> Finding:
    example = data["counterexample"]
    return Finding(
        code=data["code"],
        severity=Severity(data["severity"]),
        location=_location_from_json(data["location"]),
        message_template=data["message_template"],
        message_args=tuple((str(name), str(value)) for name, value in data["message_args"]),
        counterexample=None if example is None else _counterexample_from_json(example),
        function=data["function"],
        cause=None if data.get("cause") is None else _location_from_json(data["cause"]),
    )


def _cut_to_json(cut: BudgetCut) -> dict[str, Any]:
    return {
        "path": cut.path,
        "line": cut.line,
        "function": cut.function,
        "budget": cut.budget.value,
        "limit": cut.limit,
    }


def _cut_from_json(data: dict[str, Any]) -> BudgetCut:
    budget = Budget(data["budget"])
    return BudgetCut(str(data["path"]), int(data["line"]), str(data["function"]), budget, int(data["limit"]))


def result_to_json(result: FileResult) -> dict[str, Any]:
    return {
        "path": result.path,
        "findings": [_finding_to_json(finding) for finding in result.findings],
        "error": None if result.error is None else dataclasses.asdict(result.error),
        "notes": list(result.notes),
        "budget_cuts": [_cut_to_json(cut) for cut in result.budget_cuts],
        "unused_suppressions": [
            {"location": _location_to_json(item.location), "codes": list(item.codes)}
            for item in result.unused_suppressions
        ],
        "reads": result.reads,
    }


def result_from_json(data: dict[str, Any]) -> FileResult:
    error = data["error"]
    return FileResult(
        path=data["path"],
        findings=[_finding_from_json(item) for item in data["findings"]],
        error=None if error is None else FileError(**error),
        notes=[str(note) for note in data["notes"]],
        budget_cuts=[_cut_from_json(cut) for cut in data["budget_cuts"]],
        unused_suppressions=[
            UnusedSuppression(location=_location_from_json(item["location"]), codes=tuple(item["codes"]))
            for item in data["unused_suppressions"]
        ],
        reads={str(path): str(digest) for path, digest in data["reads"].items()},
    )


# --- the store -----------------------------------------------------------------------------------


def _entry_path(folder: Path, key: str) -> Path:
    return folder / f"v{CACHE_FORMAT}" / key[:2] / f"{key}.json"


def _load_json(folder: Path, target: Path) -> Any:
    """A stored JSON document, or None: absent, not sealed by this user (cache_guard), or corrupt."""
    text = read_entry(folder, target)
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _store_json(folder: Path, target: Path, data: Any) -> bool:
    try:
        text = json.dumps(data, separators=(",", ":"))
    except (ValueError, TypeError):
        return False
    return write_entry(folder, target, text)


StillReads = Callable[[dict[str, str]], bool]  # whether the files an answer read are unchanged


def load(folder: Path, key: str, still_reads: StillReads | None = None) -> FileResult | None:
    """The stored result, or None for a miss (absent, unreadable, corrupt or from another key, or
    computed from another file that has changed since: `still_reads` says no)."""
    for stored in _variants(folder, key):
        try:
            result = result_from_json(stored)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if not result.reads or (still_reads is not None and still_reads(result.reads)):
            return result
    return None


# Answers kept per key, each computed from other files in another state: an edit undone (a
# branch checked out and back) finds the answer computed before it, as the key alone found it
# when the index's reach was part of the key.
MAX_VARIANTS = 4


def _variants(folder: Path, key: str) -> list[Any]:
    """The stored answers of a key, most recent first ([] for a miss or a corrupt entry)."""
    try:
        data = _load_json(folder, _entry_path(folder, key))
        if data["key"] != key or not isinstance(data["variants"], list):
            return []
        return list(data["variants"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _transient(result: FileResult) -> bool:
    return result.error is not None and result.error.transient


def store(folder: Path, key: str, result: FileResult) -> bool:
    """Write an entry; False when the cache cannot be written (read-only tree, full disk) or the
    result belongs to this run only (a file stopped by the safety clock)."""
    if _transient(result):
        return False
    stored = result_to_json(result)
    older = [v for v in _variants(folder, key) if isinstance(v, dict) and v.get("reads") != result.reads]
    variants = [stored, *older][:MAX_VARIANTS]
    return _store_json(folder, _entry_path(folder, key), {"key": key, "variants": variants})


def cached_analyze(
    path: str,
    settings: Settings,
    catalog_fingerprint: str,
    compute: Callable[[], FileResult],
    *,
    dependency_digest: str | Callable[[bytes], str] = "",
    still_reads: StillReads | None = None,
    lookup_only: bool = False,
) -> FileResult | None:
    """`compute()` behind the cache; with `settings.cache` off, or an unreadable file, just compute.
    With `lookup_only`, a miss returns None instead of computing. `dependency_digest` may be a
    function of the file's bytes (so the file is read once). A stored answer that read other files
    is served only when `still_reads` finds them unchanged (none given: never)."""
    if not settings.cache:
        return None if lookup_only else compute()
    try:
        content = read_regular_file(path, MAX_SOURCE_BYTES)
    except (OSError, FileRefused):
        return None if lookup_only else compute()  # the engine turns the read failure into a FileError
    folder = cache_folder(settings)
    dependencies = dependency_digest(content) if callable(dependency_digest) else dependency_digest
    key = cache_key(content, path, settings, catalog_fingerprint, dependencies)
    hit = load(folder, key, still_reads)
    if hit is not None or lookup_only:
        return hit
    result = compute()
    store(folder, key, result)
    return result


# --- the run's cross-file index ------------------------------------------------------------------


def _project_key(files: list[Path], catalog_fingerprint: str) -> str | None:
    """Keyed on every file's path, size and modification time: any change rebuilds the index."""
    digest = hashlib.sha256(f"{engine_identity()}\0{catalog_fingerprint}\0{CACHE_FORMAT}".encode())
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            return None
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def load_project(files: list[Path], catalog_fingerprint: str, settings: Settings) -> Project | None:
    from collcheck.static.project import Project  # light: plain data

    key = _project_key(files, catalog_fingerprint)
    if key is None:
        return None
    try:
        folder = cache_folder(settings)
        data = _load_json(folder, folder / "projects" / f"{key}.json")
        return Project(
            modules=tuple((str(a), str(b)) for a, b in data["modules"]),
            communicating_names=frozenset(data["communicating_names"]),
            digest=str(data["digest"]),
            file_hashes=tuple((str(a), str(b)) for a, b in data["file_hashes"]),
            contents=tuple((str(a), str(b)) for a, b in data["contents"]),
            rank_names=frozenset(data["rank_names"]),
            selected=frozenset(data["selected"]),
            raising_names=frozenset(data["raising_names"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_project(files: list[Path], catalog_fingerprint: str, settings: Settings, project: Project) -> None:
    key = _project_key(files, catalog_fingerprint)
    if key is None:
        return
    folder = cache_folder(settings)
    payload = {
        "modules": project.modules,
        "communicating_names": sorted(project.communicating_names),
        "digest": project.digest,
        "file_hashes": project.file_hashes,
        "contents": project.contents,
        "rank_names": sorted(project.rank_names),
        "selected": sorted(project.selected),
        "raising_names": sorted(project.raising_names),
    }
    _store_json(folder, folder / "projects" / f"{key}.json", payload)


# --- each file's index facts, by path, size and modification time ------------------------------


def _facts_path(settings: Settings, catalog_fingerprint: str) -> Path:
    material = f"{engine_identity()}\0{CACHE_FORMAT}\0{catalog_fingerprint}"
    return cache_folder(settings) / "facts" / (hashlib.sha256(material.encode()).hexdigest()[:32] + ".json")


def _file_stamp(path: str) -> list[int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def load_facts(
    settings: Settings, catalog_fingerprint: str, paths: list[str]
) -> tuple[dict[str, FileFacts], dict[str, Any]]:
    """The stored facts of those `paths` whose size and modification time are unchanged, and the
    whole stored table (handed back to `store_facts`, so the file is read once per run)."""
    from collcheck.static.project import FileFacts  # light: plain data

    if not settings.cache:
        return {}, {}
    data = _load_json(cache_folder(settings), _facts_path(settings, catalog_fingerprint))
    if not isinstance(data, dict):
        return {}, {}
    found: dict[str, FileFacts] = {}
    for path in paths:
        entry = data.get(path)
        if not entry or entry[0] != _file_stamp(path):
            continue
        try:
            (
                digest,
                readable,
                triggered,
                hits,
                rank_hits,
                references,
                imports,
                assigned,
                functions,
                raise_hits,
                star_imports,
            ) = entry[1]
            found[path] = FileFacts(
                str(digest),
                bool(readable),
                bool(triggered),
                tuple(hits),
                tuple(rank_hits),
                tuple((str(name), tuple(remote), tuple(local)) for name, remote, local in references),
                tuple(imports),
                tuple(assigned),
                tuple(functions),
                tuple(raise_hits),
                tuple(star_imports),
            )
        except (ValueError, TypeError):
            continue
    return found, data


def store_facts(
    settings: Settings, catalog_fingerprint: str, facts: dict[str, FileFacts], stored: dict[str, Any]
) -> None:
    """Add or replace the facts of these files in the table `load_facts` read (entries of other
    files are kept)."""
    if not settings.cache:
        return
    target = _facts_path(settings, catalog_fingerprint)
    data = dict(stored)
    for path, item in facts.items():
        stamp = _file_stamp(path)
        if stamp is not None:
            # Shallow: the fields are already tuples of text, which `astuple` would copy one by
            # one (0.2 s for the 2,300 files of the torch tree, on the run's serial path).
            data[path] = [stamp, [getattr(item, field.name) for field in dataclasses.fields(item)]]
    _store_json(cache_folder(settings), target, data)


# --- which bundled frameworks each file imports (bundled_summaries.py), by its stat ------------


def _import_scan_path(settings: Settings, scanned_for: str) -> Path:
    material = f"{engine_identity()}\0{CACHE_FORMAT}\0{scanned_for}"
    return cache_folder(settings) / "imports" / (hashlib.sha256(material.encode()).hexdigest()[:32] + ".json")


def load_import_scan(settings: Settings, scanned_for: str) -> dict[str, Any]:
    """Path -> [its size and modification time, the bundled packages it imports], as the last run
    that looked for the packages `scanned_for` names found them."""
    if not settings.cache:
        return {}
    data = _load_json(cache_folder(settings), _import_scan_path(settings, scanned_for))
    return data if isinstance(data, dict) else {}


def store_import_scan(settings: Settings, scanned_for: str, table: dict[str, Any]) -> None:
    if settings.cache:
        _store_json(cache_folder(settings), _import_scan_path(settings, scanned_for), table)


def file_stamp(path: str) -> list[int] | None:
    """A file's size and modification time (what the stat-keyed tables compare)."""
    return _file_stamp(path)


# --- the run manifest: a warm run answers from file stats alone --------------------------------


def _manifest_path(settings: Settings, catalog_fingerprint: str, roots: list[str]) -> Path:
    material = "\0".join(
        [engine_identity(), str(CACHE_FORMAT), settings_fingerprint(settings), catalog_fingerprint, *roots]
    )
    return cache_folder(settings) / "runs" / (hashlib.sha256(material.encode()).hexdigest()[:32] + ".json")


def _stamp(path: str, dependencies: str) -> list[Any] | None:
    stamp = _file_stamp(path)
    return None if stamp is None else [*stamp, dependencies]


def load_manifest(
    settings: Settings,
    catalog_fingerprint: str,
    roots: list[str],
    files: dict[str, str],
    still_reads: StillReads | None = None,
) -> dict[str, FileResult]:
    """Results of files whose size, modification time and dependencies are unchanged since the
    last run with the same settings (`files` maps each path to its dependency digest), and
    computed from other files that `still_reads` finds unchanged."""
    if not settings.cache:
        return {}
    try:
        data = _load_json(cache_folder(settings), _manifest_path(settings, catalog_fingerprint, roots))
        results: dict[str, FileResult] = {}
        for path, dependencies in files.items():
            entry = data.get(path)
            if entry is not None and entry[0] == _stamp(path, dependencies):
                result = result_from_json(entry[1])
                if not result.reads or (still_reads is not None and still_reads(result.reads)):
                    results[path] = result
        return results
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return {}


def store_manifest(
    settings: Settings, catalog_fingerprint: str, roots: list[str], results: dict[str, tuple[str, FileResult]]
) -> None:
    if not settings.cache:
        return
    payload = {}
    for path, (dependencies, result) in results.items():
        stamp = _stamp(path, dependencies)
        if stamp is not None and not _transient(result):
            payload[path] = [stamp, result_to_json(result)]
    _store_json(cache_folder(settings), _manifest_path(settings, catalog_fingerprint, roots), payload)


# --- the files of the project around a partial run, by folder modification times ----------------

# A folder changed this recently may change again within the file system's time resolution
# without its modification time moving: such a walk is not stored.
_RACY_SECONDS = 2.0


def _walk_path(settings: Settings, root: Path) -> Path:
    material = json.dumps(
        [
            __version__,
            CACHE_FORMAT,
            str(root),
            settings.root,
            list(settings.exclude),
            list(settings.extend_exclude),
            settings.respect_gitignore,
        ]
    )
    return cache_folder(settings) / "walks" / (hashlib.sha256(material.encode()).hexdigest()[:32] + ".json")


def _ignore_files(root: Path, folders: list[str]) -> list[str]:
    """Files that decide what git ignores: each folder's .gitignore, and those above the root."""
    above = [str(folder / name) for folder in root.parents for name in (".gitignore", ".git/info/exclude")]
    return [
        *(os.path.join(folder, ".gitignore") for folder in folders),
        str(root / ".git/info/exclude"),
        *above,
    ]


def _walk_stamps(root: Path, folders: list[str]) -> list[Any]:
    """Modification times of the folders walked (an entry added, removed or renamed moves them)
    and of the ignore files; None for a path that is not there."""
    stamps: list[Any] = []
    for path in [*folders, *_ignore_files(root, folders)]:
        try:
            stamps.append(os.stat(path).st_mtime_ns)
        except OSError:
            stamps.append(None)
    return stamps


def load_walk(settings: Settings, root: Path) -> dict[str, str] | None:
    """The project's files (each with its real path) as the last walk of `root` found them, when
    no folder walked and no ignore file changed since; None otherwise."""
    if not settings.cache:
        return None
    data = _load_json(cache_folder(settings), _walk_path(settings, root))
    try:
        if data["stamps"] != _walk_stamps(root, data["folders"]):
            return None
        return {str(path): str(real) for path, real in data["files"]}
    except (KeyError, TypeError, ValueError):
        return None


def store_walk(settings: Settings, root: Path, folders: list[str], files: dict[str, str]) -> None:
    if not settings.cache:
        return
    stamps = _walk_stamps(root, folders)
    newest = max((stamp for stamp in stamps if stamp is not None), default=0)
    if newest / 1e9 > time.time() - _RACY_SECONDS:
        return
    payload = {"folders": folders, "stamps": stamps, "files": [[a, b] for a, b in files.items()]}
    _store_json(cache_folder(settings), _walk_path(settings, root), payload)
