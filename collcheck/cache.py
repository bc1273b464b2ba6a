"""A content-keyed cache of per-file results in `.collcheck_cache/`.

The key is the sha256 of the file's bytes, its path (findings carry it), collcheck's version, a
fingerprint of the settings that can change what the engine finds, the catalog fingerprint and a
`dependency_digest`. That last one is the hook for cross-file summaries: once the engine reports
which files a file's findings depend on, the caller passes a digest of those files' summaries so
that a change in a callee re-checks its callers. It is empty until then.

This module must stay light: a warm run imports it, json and hashlib, never z3, libcst or the
static engine. A corrupt or unreadable entry is a miss; a cache that cannot be written is skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collcheck import __version__
from collcheck.config import Settings
from collcheck.findings import (
    Counterexample,
    FileError,
    FileResult,
    Finding,
    Location,
    Severity,
    TraceStep,
    UnusedSuppression,
)

CACHE_FORMAT = 1  # bump when the stored layout changes; old entries then simply miss

# Settings that choose which files are read or how the run is scheduled, not what a file yields.
_KEY_IGNORED_SETTINGS = frozenset(
    {"jobs", "cache", "cache_dir", "exclude", "extend_exclude", "respect_gitignore", "root"}
)


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
        __version__,
        path,
        settings_fingerprint(settings),
        catalog_fingerprint,
        dependency_digest,
    ):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(content)
    return digest.hexdigest()


def cache_folder(settings: Settings) -> Path:
    folder = Path(settings.cache_dir)
    return folder if folder.is_absolute() else Path(settings.root) / folder


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
    }


def _counterexample_from_json(data: dict[str, Any]) -> Counterexample:
    return Counterexample(
        world_size=data["world_size"],
        ranks=tuple(
            (int(rank), tuple(_step_from_json(step) for step in steps)) for rank, steps in data["ranks"]
        ),
        values=tuple((str(name), str(value)) for name, value in data["values"]),
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
    )


def result_to_json(result: FileResult) -> dict[str, Any]:
    return {
        "path": result.path,
        "findings": [_finding_to_json(finding) for finding in result.findings],
        "error": None if result.error is None else dataclasses.asdict(result.error),
        "notes": list(result.notes),
        "unused_suppressions": [
            {"location": _location_to_json(item.location), "codes": list(item.codes)}
            for item in result.unused_suppressions
        ],
    }


def result_from_json(data: dict[str, Any]) -> FileResult:
    error = data["error"]
    return FileResult(
        path=data["path"],
        findings=[_finding_from_json(item) for item in data["findings"]],
        error=None if error is None else FileError(**error),
        notes=[str(note) for note in data["notes"]],
        unused_suppressions=[
            UnusedSuppression(location=_location_from_json(item["location"]), codes=tuple(item["codes"]))
            for item in data["unused_suppressions"]
        ],
    )


# --- the store -----------------------------------------------------------------------------------


def _entry_path(folder: Path, key: str) -> Path:
    return folder / f"v{CACHE_FORMAT}" / key[:2] / f"{key}.json"


def load(folder: Path, key: str) -> FileResult | None:
    """The stored result, or None for a miss (absent, unreadable, corrupt or from another key)."""
    try:
        data = json.loads(_entry_path(folder, key).read_text(encoding="utf-8"))
        if data["key"] != key:
            return None
        return result_from_json(data["result"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _ensure_folder(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        _write_atomically(ignore, "# Automatically created by collcheck.\n*\n")


def _write_atomically(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def store(folder: Path, key: str, result: FileResult) -> bool:
    """Write an entry; False when the cache cannot be written (read-only tree, full disk)."""
    try:
        _ensure_folder(folder)
        payload = json.dumps({"key": key, "result": result_to_json(result)}, separators=(",", ":"))
        _write_atomically(_entry_path(folder, key), payload)
    except (OSError, ValueError, TypeError):
        return False
    return True


def cached_analyze(
    path: str,
    settings: Settings,
    catalog_fingerprint: str,
    compute: Callable[[], FileResult],
    *,
    dependency_digest: str = "",
) -> FileResult:
    """`compute()` behind the cache; with `settings.cache` off, or an unreadable file, just compute."""
    if not settings.cache:
        return compute()
    try:
        content = Path(path).read_bytes()
    except OSError:
        return compute()  # the engine side turns the read failure into a FileError
    folder = cache_folder(settings)
    key = cache_key(content, path, settings, catalog_fingerprint, dependency_digest)
    hit = load(folder, key)
    if hit is not None:
        return hit
    result = compute()
    store(folder, key, result)
    return result
