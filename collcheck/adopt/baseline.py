"""Baselines: record today's findings, then report only the findings that are new.

A baseline file holds one entry per finding, keyed by the SARIF partial fingerprint
(`collcheck.findings.fingerprints`): code, path, function and message without line numbers,
so an entry survives lines moving. Paths in it are relative to the baseline file's folder, so
the file works from any working directory and on any checkout.

    {"collcheck_baseline": 1, "entries": [{"fingerprint": ..., "code": ..., "path": ..., "message": ...}]}

Entries whose file was checked but which no longer occur are reported as stale, as ruff reports
unused suppressions; entries for files outside the run are left alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from collcheck.adopt.request import AdoptionError
from collcheck.findings import BaselineEntry, Finding, RunResult, fingerprints
from collcheck.safe_write import WriteRefused, WriteRoots, write_output
from collcheck.source import MAX_CONFIG_BYTES, FileRefused, read_regular_file

FORMAT_KEY = "collcheck_baseline"
FORMAT_VERSION = 1


class BaselineError(AdoptionError):
    """An unreadable or malformed baseline file (a usage error: exit code 2)."""


def _root(baseline: Path) -> Path:
    return Path(os.path.realpath(baseline.parent if str(baseline.parent) else "."))


def _relative(path: str, root: Path) -> str:
    try:
        return Path(os.path.relpath(os.path.realpath(path), root)).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(path).as_posix()


def _entries(findings: list[Finding], root: Path) -> list[BaselineEntry]:
    """Findings as entries; the fingerprint is computed on paths relative to `root`."""
    relative = [_with_path(finding, _relative(finding.location.path, root)) for finding in findings]
    return [
        BaselineEntry(fingerprint, finding.code, finding.location.path, finding.message)
        for finding, fingerprint in zip(relative, fingerprints(relative, root), strict=True)
    ]


def _with_path(finding: Finding, path: str) -> Finding:
    from dataclasses import replace

    return replace(finding, location=replace(finding.location, path=path))


def write_baseline(result: RunResult, baseline: Path, roots: WriteRoots) -> int:
    """Write every finding of `result` to `baseline` (an output file: collcheck.safe_write, never
    through a link); returns the number of entries."""
    entries = _entries(result.findings, _root(baseline))
    data = {
        FORMAT_KEY: FORMAT_VERSION,
        "entries": [
            {"fingerprint": e.fingerprint, "code": e.code, "path": e.path, "message": e.message}
            for e in entries
        ],
    }
    try:
        write_output(baseline, (json.dumps(data, indent=2) + "\n").encode("utf-8"), roots)
    except WriteRefused as refused:
        raise BaselineError(f"cannot write baseline: {refused}") from None
    except OSError as error:
        raise BaselineError(f"cannot write baseline {baseline}: {error.strerror or error}") from None
    return len(entries)


def read_baseline(baseline: Path) -> list[BaselineEntry]:
    try:
        data = json.loads(read_regular_file(baseline, MAX_CONFIG_BYTES * 16).decode("utf-8"))
    except (OSError, ValueError, RecursionError, FileRefused) as error:
        raise BaselineError(f"cannot read baseline {baseline}: {error}") from error
    version = data.get(FORMAT_KEY) if isinstance(data, dict) else None
    if type(version) is not int or version != FORMAT_VERSION:  # `true` == 1 in Python: not a version
        raise BaselineError(f"{baseline} is not a collcheck baseline (version {FORMAT_VERSION})")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise BaselineError(f"{baseline}: 'entries' must be a list")
    fields = ("fingerprint", "code", "path", "message")
    if not all(isinstance(e, dict) and all(isinstance(e.get(k), str) for k in fields) for e in entries):
        raise BaselineError(f"{baseline}: every entry needs string {', '.join(fields)}")
    return [BaselineEntry(*(entry[key] for key in fields)) for entry in entries]


def apply_baseline(result: RunResult, baseline: Path) -> RunResult:
    """Drop the findings recorded in `baseline` from `result` (in place, and returned); fill
    `result.stale_baseline` with the entries of checked files that no longer occur."""
    recorded = read_baseline(baseline)
    root = _root(baseline)
    findings = result.findings
    current = _entries(findings, root)
    known = {entry.fingerprint for entry in recorded}
    drop = {id(f) for f, entry in zip(findings, current, strict=True) if entry.fingerprint in known}
    for file in result.files:
        file.findings = [finding for finding in file.findings if id(finding) not in drop]
    found = {entry.fingerprint for entry in current}
    checked = {_relative(file.path, root) for file in result.files if file.error is None}
    result.stale_baseline = [e for e in recorded if e.fingerprint not in found and e.path in checked]
    return result
