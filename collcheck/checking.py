"""`collcheck check` without its argument parser: options in, report written, exit code out.

The typer command (`collcheck.commands.check_command`) parses the options into `CheckOptions`;
`collcheck.cli.main` calls `run_check` directly for a plain `collcheck check FILE...` (pre-commit's
call), so that such a run never imports typer. Writes the report to stdout (or `--output`) and
messages to stderr; never exits.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from collcheck.adopt.request import Adoption, AdoptionError, baseline_path
from collcheck.safe_write import WriteRoots

if TYPE_CHECKING:
    from collcheck.config import BudgetPolicy


@dataclass(frozen=True)
class CheckOptions:
    """The command line's options of `collcheck check`; None: the configuration's value."""

    output_format: str = "text"
    select: str | None = None
    extend_select: str | None = None
    ignore: str | None = None
    world_size: int | None = None
    jobs: int | None = None
    no_cache: bool = False
    config: Path | None = None
    z3_rlimit: int | None = None
    z3_function_rlimit: int | None = None
    file_timeout: float | None = None
    budget_exceeded: str | None = None  # "note" or "error" (config.BudgetPolicy)
    statistics: bool = False
    exit_zero: bool = False
    verbose: bool = False
    output: Path | None = None
    adoption: Adoption = field(default_factory=Adoption)
    python: str | None = None  # --python: the environment whose packages are summarised


def codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(code.strip().upper() for code in value.split(",") if code.strip())


def validate_codes(settings: object) -> None:
    """A code or prefix that names no rule is a typo that would silently disable checking."""
    if not any(getattr(settings, option) for option in ("select", "extend_select", "ignore")):
        return  # nothing to validate: the rule registry is not loaded
    from collcheck.checks import CODE_TABLE
    from collcheck.config import ConfigError

    for option in ("select", "extend_select", "ignore"):
        for code in getattr(settings, option):
            if code != "ALL" and not any(known.startswith(code) for known in CODE_TABLE):
                raise ConfigError(f"unknown rule code or prefix '{code}' in {option.replace('_', '-')}")


def _error(message: str) -> int:
    print(f"collcheck: error: {message}", file=sys.stderr)
    return 2


def write_roots(targets: list[Path], options: CheckOptions) -> WriteRoots:
    """Where this run may write (collcheck.safe_write): the folder of the pyproject.toml that
    configured it, and each path it checks."""
    from collcheck.config import find_pyproject

    pyproject = options.config or find_pyproject(targets)
    return WriteRoots.of(pyproject.parent if pyproject is not None else None, targets)


def run_check(paths: list[Path], options: CheckOptions) -> int:
    """Check `paths` (the current folder when empty), write the report; the exit code."""
    from collcheck.api import check_paths
    from collcheck.catalog import CatalogError
    from collcheck.config import BudgetPolicy, ConfigError, load_settings
    from collcheck.report import FORMATS, render

    if options.output_format not in FORMATS:
        return _error(f"unknown format '{options.output_format}' (expected one of {', '.join(FORMATS)})")
    targets = paths or [Path(".")]
    try:
        configured = load_settings(targets, options.config)
        policy = None if options.budget_exceeded is None else _policy(options.budget_exceeded)
        selected = codes(options.select)
        ignored = codes(options.ignore)
        if selected is not None and ignored is None:
            # The command line wins over the configuration, as in ruff: a code selected here is
            # not taken away by the configuration's `ignore`.
            ignored = tuple(code for code in configured.ignore if code not in selected)
        settings = configured.with_overrides(
            select=selected,
            extend_select=codes(options.extend_select),
            ignore=ignored,
            world_size=options.world_size,
            jobs=options.jobs,
            z3_rlimit=options.z3_rlimit,
            z3_function_rlimit=options.z3_function_rlimit,
            file_timeout=options.file_timeout,
            budget_exceeded=policy,
            cache=False if options.no_cache else None,
            python=options.python,
        )
        validate_codes(settings)
        result = check_paths(targets, settings)
        request = options.adoption
        if request.baseline is None:
            request = replace(request, baseline=baseline_path(None, settings))
        roots = write_roots(targets, options) if request.writes or options.output else WriteRoots(())
        if request.requested:  # the adoption flow is loaded only when asked for
            from collcheck.adopt.flow import adopt

            outcome = adopt(result, settings, request, lambda: check_paths(targets, settings), roots)
            for message in outcome.messages:
                print(message, file=sys.stderr)
            if outcome.exit_code is not None:
                if outcome.output:
                    sys.stdout.write(outcome.output)
                return outcome.exit_code
            result = outcome.result
    except (ConfigError, CatalogError, AdoptionError) as error:
        return _error(str(error))
    report = render(result, options.output_format, verbose=options.verbose, statistics=options.statistics)
    if options.verbose:  # on stderr: the report (stdout or -o) stays the same with and without -v
        print(
            f"solver: {result.z3_queries} z3 queries asked, {result.settled_pairs} pairs of paths "
            "settled without z3 (files read from the cache ask nothing)",
            file=sys.stderr,
        )
        from collcheck.static.over_budget import budget_counts  # only under -v: the engine is heavy

        if result.summaries:
            print(f"summaries of installed packages: {', '.join(result.summaries)}", file=sys.stderr)
        for note in result.summary_notes:
            print(f"summaries of installed packages: {note}", file=sys.stderr)
        reduced, skipped = budget_counts(result.notes)
        print(
            f"budget: {reduced} functions over the work budget analysed in the reduced mode, "
            f"{skipped} skipped (over it there too)",
            file=sys.stderr,
        )
    if options.output is not None:
        from collcheck.safe_write import WriteRefused, write_output

        try:
            write_output(options.output, (report + "\n").encode("utf-8"), roots)
        except WriteRefused as refused:
            return _error(f"cannot write the report: {refused}")
        except OSError as error:
            return _error(f"cannot write the report to {options.output}: {error.strerror or error}")
    else:
        print(report)
    return 0 if options.exit_zero else result.gate(settings.budget_exceeded is BudgetPolicy.ERROR)


def _policy(value: str) -> BudgetPolicy:
    from collcheck.config import BudgetPolicy, ConfigError

    try:
        return BudgetPolicy(value)
    except ValueError:
        choices = ", ".join(policy.value for policy in BudgetPolicy)
        raise ConfigError(f"--budget-exceeded must be one of {choices} (got '{value}')") from None
