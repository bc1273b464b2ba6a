"""Reporters turn a RunResult into text. They never decide what is a finding."""

from __future__ import annotations

from collections.abc import Callable

from collcheck.findings import RunResult

FORMATS = ("text", "concise", "json", "sarif", "github", "junit")


def render(result: RunResult, fmt: str, *, verbose: bool = False, statistics: bool = False) -> str:
    renderer = _renderer(fmt)
    return renderer(result, verbose, statistics)


def _renderer(fmt: str) -> Callable[[RunResult, bool, bool], str]:
    if fmt in ("text", "concise"):
        from collcheck.report.text import render_text

        return lambda result, verbose, statistics: render_text(
            result, concise=fmt == "concise", verbose=verbose, statistics=statistics
        )
    if fmt == "json":
        from collcheck.report.json import render_json

        return lambda result, verbose, statistics: render_json(result)
    if fmt == "sarif":
        from collcheck.report.sarif import render_sarif

        return lambda result, verbose, statistics: render_sarif(result)
    if fmt == "github":
        from collcheck.report.github import render_github

        return lambda result, verbose, statistics: render_github(result)
    if fmt == "junit":
        from collcheck.report.junit import render_junit

        return lambda result, verbose, statistics: render_junit(result)
    raise ValueError(f"unknown format '{fmt}' (expected one of {', '.join(FORMATS)})")
