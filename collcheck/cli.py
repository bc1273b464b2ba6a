"""The command line, kept thin: parse options, call the API, render, choose the exit code.

`collcheck PATH...` is `collcheck check PATH...`. Exit codes: 0 clean, 1 findings (or files that
could not be analysed), 2 usage or configuration error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from collcheck import __version__
from collcheck.memory.command import EPILOG as ESTIMATE_EPILOG
from collcheck.memory.command import estimate_command
from collcheck.runtime.command import run_command, trace_command

app = typer.Typer(
    name="collcheck",
    help="Find collective-communication deadlocks and memory blow-ups in distributed PyTorch code.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

SUBCOMMANDS = ("check", "rule", "rules", "estimate", "run", "trace", "version")


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(code.strip().upper() for code in value.split(",") if code.strip())


def validate_codes(settings: object) -> None:
    """A code or prefix that names no rule is a typo that would silently disable checking."""
    from collcheck.checks import CODE_TABLE
    from collcheck.config import ConfigError

    for option in ("select", "extend_select", "ignore"):
        for code in getattr(settings, option):
            if code != "ALL" and not any(known.startswith(code) for known in CODE_TABLE):
                raise ConfigError(f"unknown rule code or prefix '{code}' in {option.replace('_', '-')}")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"collcheck: error: {message}", err=True)
    return typer.Exit(2)


@app.command("check")
def check_command(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders to check.")] = None,
    output_format: Annotated[
        str, typer.Option("--format", "--output-format", help="text, concise, json, sarif, github or junit.")
    ] = "text",
    select: Annotated[str | None, typer.Option(help="Comma-separated codes or prefixes to enable.")] = None,
    extend_select: Annotated[
        str | None, typer.Option(help="Codes to enable on top of the selection.")
    ] = None,
    ignore: Annotated[str | None, typer.Option(help="Comma-separated codes or prefixes to disable.")] = None,
    world_size: Annotated[
        int | None, typer.Option(min=2, help="Only consider this world size (default: any >= 2).")
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Worker processes (default: all cores).")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the cache.")] = False,
    config: Annotated[Path | None, typer.Option(help="Use this pyproject.toml instead of searching.")] = None,
    z3_timeout: Annotated[int | None, typer.Option(min=1, help="Milliseconds per solver query.")] = None,
    file_timeout: Annotated[
        float | None,
        typer.Option(min=0, max=86_400, help="Seconds of analysis per file before it is stopped (0: none)."),
    ] = None,
    statistics: Annotated[bool, typer.Option("--statistics", help="Count findings per code.")] = False,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when there are findings.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print solver notes.")] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to this file.")
    ] = None,
    fix: Annotated[bool, typer.Option("--fix", help="Apply safe fixes, then report what is left.")] = False,
    unsafe_fixes: Annotated[
        bool, typer.Option("--unsafe-fixes", help="Also consider fixes that change what runs.")
    ] = False,
    diff: Annotated[
        bool, typer.Option("--diff", help="Print the fixes as a unified diff instead of writing them.")
    ] = False,
    show_fixes: Annotated[
        bool, typer.Option("--show-fixes", help="Say for each finding whether a fix is available.")
    ] = False,
    add_ignore: Annotated[
        str | None,
        typer.Option(
            "--add-ignore",
            metavar="[=REASON]",
            help="Write `# collcheck: ignore[CODE] REASON` for every finding.",
        ),
    ] = None,
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="Report only findings not recorded in this file.")
    ] = None,
    write_baseline: Annotated[
        Path | None, typer.Option("--write-baseline", help="Record today's findings in this file.")
    ] = None,
) -> None:
    """Check Python files for collective mismatches, deadlocks and memory blow-ups."""
    from collcheck.api import check_paths
    from collcheck.catalog import CatalogError
    from collcheck.config import ConfigError, load_settings
    from collcheck.fix.flow import Adoption, AdoptionError, adopt, baseline_path
    from collcheck.report import FORMATS, render

    if output_format not in FORMATS:
        raise _fail(f"unknown format '{output_format}' (expected one of {', '.join(FORMATS)})")
    targets = paths or [Path(".")]
    try:
        configured = load_settings(targets, config)
        selected = _codes(select)
        ignored = _codes(ignore)
        if selected is not None and ignored is None:
            # The command line wins over the configuration, as in ruff: a code selected here is
            # not taken away by the configuration's `ignore`.
            ignored = tuple(code for code in configured.ignore if code not in selected)
        settings = configured.with_overrides(
            select=selected,
            extend_select=_codes(extend_select),
            ignore=ignored,
            world_size=world_size,
            jobs=jobs,
            z3_timeout_ms=z3_timeout,
            file_timeout=file_timeout,
            cache=False if no_cache else None,
        )
        validate_codes(settings)
        result = check_paths(targets, settings)
        adoption = Adoption(
            fix=fix,
            unsafe_fixes=unsafe_fixes,
            diff=diff,
            show_fixes=show_fixes,
            add_ignore=add_ignore,
            baseline=baseline_path(baseline, settings),
            write_baseline=write_baseline,
        )
        outcome = adopt(result, settings, adoption, lambda: check_paths(targets, settings))
    except (ConfigError, CatalogError, AdoptionError) as error:
        raise _fail(str(error)) from error
    for message in outcome.messages:
        typer.echo(message, err=True)
    if outcome.exit_code is not None:
        if outcome.output:
            typer.echo(outcome.output, nl=False)
        raise typer.Exit(outcome.exit_code)
    result = outcome.result
    report = render(result, output_format, verbose=verbose, statistics=statistics)
    if verbose:  # on stderr: the report (stdout or -o) stays the same with and without -v
        typer.echo(
            f"solver: {result.z3_queries} z3 queries asked, {result.settled_pairs} pairs of paths "
            "settled without z3 (files read from the cache ask nothing)",
            err=True,
        )
    if output is not None:
        output.write_text(report + "\n", encoding="utf-8")
    else:
        typer.echo(report)
    raise typer.Exit(0 if exit_zero else result.exit_code)


@app.command("rule")
def rule_command(code: Annotated[str, typer.Argument(help="A rule code, e.g. CC001.")]) -> None:
    """Print a rule's documentation."""
    from collcheck.checks import rule_by_code

    rule = rule_by_code(code)
    if rule is None:
        raise _fail(f"unknown rule '{code}' (see `collcheck rules`)")
    typer.echo(f"# {rule.code} {rule.name} ({rule.severity.value}, {rule.status}, since {rule.since})\n")
    typer.echo(rule.doc.strip())


@app.command("rules")
def rules_command(
    output_format: Annotated[str, typer.Option("--format", help="text, json or markdown.")] = "text",
) -> None:
    """List every rule with its code, status and summary."""
    import json

    from collcheck.checks import all_rules, markdown_table

    rules = all_rules()
    if output_format == "markdown":
        typer.echo(markdown_table())
        return
    if output_format == "json":
        typer.echo(
            json.dumps(
                [
                    {
                        "code": r.code,
                        "name": r.name,
                        "severity": r.severity.value,
                        "status": r.status,
                        "default": r.default_enabled,
                        "summary": r.summary,
                    }
                    for r in rules
                ],
                indent=2,
            )
        )
        return
    for rule in rules:
        flag = "" if rule.default_enabled else " (off by default)"
        typer.echo(f"{rule.code}  {rule.name:<42} {rule.severity.value:<8}{flag}")


@app.command("version")
def version_command() -> None:
    """Print collcheck's version."""
    typer.echo(f"collcheck {__version__}")


app.command(
    "estimate",
    help="Estimate per-rank KV-cache and all-gather memory, and whether it fits a budget.",
    epilog=ESTIMATE_EPILOG,
)(estimate_command)
app.command(
    "run",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Run a command (python script.py, torchrun ...) with the collective tracer switched on.",
)(run_command)
app.command("trace", help="Analyse recorded traces (collcheck or Flight Recorder) offline.")(trace_command)


def _with_default_command(argv: list[str]) -> list[str]:
    """`collcheck src/` means `collcheck check src/`, as with ruff."""
    if not argv:
        return argv
    first = argv[0]
    if first in SUBCOMMANDS or first in ("-h", "--help", "--version"):
        return argv
    return ["check", *argv]


# Options whose value is optional (`--add-ignore` or `--add-ignore=REASON`); click's options
# always take one, so the bare form is given the empty value before parsing.
OPTIONAL_VALUE_OPTIONS = ("--add-ignore",)


def _with_optional_values(argv: list[str]) -> list[str]:
    if argv[:1] != ["check"] and argv[:1] and argv[0] in SUBCOMMANDS:  # only `check` has them
        return argv
    if "--" in argv:  # nothing after `--` is an option
        cut = argv.index("--")
        return [*_with_optional_values(argv[:cut]), *argv[cut:]]
    return [f"{arg}=" if arg in OPTIONAL_VALUE_OPTIONS else arg for arg in argv]


def main(argv: list[str] | None = None) -> int:
    """Entry point callable from tests: returns the exit code instead of exiting."""
    args = _with_optional_values(list(sys.argv[1:] if argv is None else argv))
    if args[:1] == ["--version"]:
        typer.echo(f"collcheck {__version__}")
        return 0
    try:
        code = app(args=_with_default_command(args), prog_name="collcheck", standalone_mode=False)
    except typer.Exit as done:
        return int(done.exit_code)
    except typer.Abort:
        return 130
    except SystemExit as done:
        return int(done.code or 0)
    except Exception as error:
        show = getattr(error, "show", None)
        if callable(show) and hasattr(error, "exit_code"):  # usage errors: bad option, missing argument
            show()
            return 2
        raise
    return int(code or 0)


def run_main() -> None:
    sys.exit(main())
