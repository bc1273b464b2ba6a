"""The typer commands: parse options, call the API, render, choose the exit code.

Imported by `collcheck.cli.main` for every command line except a plain `collcheck check FILE...`
(see there). Exit codes: 0 clean, 1 findings (or files that could not be analysed), 2 usage or
configuration error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from collcheck import __version__
from collcheck.config import CAPS, COMMAND_LINE_MAX_FILE_TIMEOUT
from collcheck.memory.command import EPILOG as ESTIMATE_EPILOG
from collcheck.memory.command import estimate_command
from collcheck.runtime.command import convert_command, run_command, trace_command

app = typer.Typer(
    name="collcheck",
    help="Find collective-communication deadlocks and memory blow-ups in distributed PyTorch code.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


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
    z3_rlimit: Annotated[
        int | None,
        typer.Option(min=1, max=int(CAPS["z3-rlimit"]), help="z3 resource units per solver query."),
    ] = None,
    z3_function_rlimit: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=int(CAPS["z3-function-rlimit"]),
            help="z3 resource units for all the solver queries of one function.",
        ),
    ] = None,
    file_timeout: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=COMMAND_LINE_MAX_FILE_TIMEOUT,
            help="Safety clock: seconds per file before it is stopped as an error (0: none).",
        ),
    ] = None,
    budget_exceeded: Annotated[
        str | None,
        typer.Option(
            help="A function cut short by a work budget is a 'note' (default) or an 'error' (exit 1)."
        ),
    ] = None,
    statistics: Annotated[bool, typer.Option("--statistics", help="Count findings per code.")] = False,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when there are findings.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also print the analysis notes (functions run in the reduced mode, solver limits) and, "
            "on stderr, how much the solver and the work budgets did.",
        ),
    ] = False,
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
    python: Annotated[
        str | None,
        typer.Option(
            "--python",
            help="The environment whose installed packages are summarised: an interpreter path or a "
            "virtualenv folder (never run).",
        ),
    ] = None,
) -> None:
    """Check Python files for collective mismatches, deadlocks and memory blow-ups."""
    from collcheck.adopt.request import Adoption
    from collcheck.checking import CheckOptions, run_check

    adoption = Adoption(
        fix=fix,
        unsafe_fixes=unsafe_fixes,
        diff=diff,
        show_fixes=show_fixes,
        add_ignore=add_ignore,
        baseline=baseline,
        write_baseline=write_baseline,
    )
    options = CheckOptions(
        output_format=output_format,
        select=select,
        extend_select=extend_select,
        ignore=ignore,
        world_size=world_size,
        jobs=jobs,
        no_cache=no_cache,
        config=config,
        z3_rlimit=z3_rlimit,
        z3_function_rlimit=z3_function_rlimit,
        file_timeout=file_timeout,
        budget_exceeded=budget_exceeded,
        statistics=statistics,
        exit_zero=exit_zero,
        verbose=verbose,
        output=output,
        adoption=adoption,
        python=python,
    )
    raise typer.Exit(run_check(list(paths or []), options))


@app.command("summarize")
def summarize_command(
    target: Annotated[
        str, typer.Argument(help="An installed package's name, or the path of a package folder or .py file.")
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the summary here (.json: JSON, else TOML).")
    ] = None,
    python: Annotated[
        str | None,
        typer.Option("--python", help="Find PACKAGE in this environment (an interpreter path or a folder)."),
    ] = None,
) -> None:
    """Summarise which functions of a package communicate, as a catalog file (`summaries = [...]`)."""
    from collcheck.catalog import CatalogError
    from collcheck.config import ConfigError
    from collcheck.summarize import summarize

    try:
        text = summarize(target, python, json_output=output is not None and output.suffix == ".json")
    except (ConfigError, CatalogError) as error:
        raise _fail(str(error)) from error
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


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
    output_format: Annotated[
        str, typer.Option("--format", help="text, json or markdown (the README's rule table).")
    ] = "text",
) -> None:
    """List every rule: its code, name, severity, status (a rule off by default says so) and summary."""
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
        typer.echo(f"{rule.code}  {rule.name:<42} {rule.severity.value:<8}{rule.status}{flag}")
        typer.echo(f"       {rule.summary}")


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
app.command("convert-trace", help="Convert collcheck traces between JSON Lines and the binary format.")(
    convert_command
)
