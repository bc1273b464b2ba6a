"""`collcheck run` and `collcheck trace`: thin CLI over launch.py and analyze.py."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from collcheck.runtime.analyze import Analysis, TraceError, analyze, load_dir, render_text, to_json

TRACE_FORMATS = ("text", "json", "perfetto")
STDOUT = Path("-")  # `--output -`
HANG_GRACE_S = 30.0  # the launcher's backstop fires this long after the in-process watchdog should have


def run_command(
    ctx: typer.Context,
    verify: Annotated[bool, typer.Option("--verify", help="Cross-check ranks in the background.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Check agreement before each collective.")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds a collective may wait before a stall report.")
    ] = 300.0,
    trace_dir: Annotated[Path, typer.Option("--trace-dir", help="Where each rank writes its trace.")] = Path(
        "collcheck-trace"
    ),
    native: Annotated[
        bool,
        typer.Option(
            "--native/--no-native",
            help="Record mode: the compiled C++ kernel (built once, about a minute) or the Python one.",
        ),
    ] = True,
    print_env: Annotated[
        bool, typer.Option("--print-env", help="Print the environment for launchers collcheck does not wrap.")
    ] = False,
) -> None:
    """Run COMMAND (python script.py, torchrun ...) with the collective tracer in every process."""
    from collcheck.runtime import exits, launch
    from collcheck.runtime.tracer import TraceConfig, config_to_env

    config = TraceConfig(
        trace_dir=str(trace_dir), verify=verify or strict, strict=strict, timeout_s=timeout, native=native
    )
    env = launch.tracing_env({}, config_to_env(config))
    if print_env:
        for key, value in sorted(env.items()):
            shown = f"{value}:$PYTHONPATH" if key == "PYTHONPATH" else value
            typer.echo(f"export {key}={shlex.quote(shown) if key != 'PYTHONPATH' else shown}")
        raise typer.Exit(0)
    command = list(ctx.args)
    if not command:
        typer.echo("collcheck: error: no command (usage: collcheck run [OPTIONS] -- COMMAND...)", err=True)
        raise typer.Exit(2)
    launch.clear_old_traces(str(trace_dir))
    exits.clear(str(trace_dir))
    if config.uses_native:
        launch.prebuild_native()
    outcome = launch.run(
        command,
        launch.tracing_env(dict(os.environ), config_to_env(config)),
        trace_dir=str(trace_dir),
        hang_after_s=timeout + HANG_GRACE_S,
    )
    raise typer.Exit(_finish(outcome, str(trace_dir), strict))


def _finish(outcome: object, trace_dir: str, strict: bool) -> int:
    """Print the cross-rank analysis when the job failed, hung, was interrupted or diverged, then
    the one-paragraph verdict, last; return the verdict's status (verdict.py)."""
    from collcheck.runtime import exits, verdict
    from collcheck.runtime.launch import RunOutcome

    assert isinstance(outcome, RunOutcome)
    try:
        analysis = analyze(load_dir(trace_dir))
    except TraceError:
        if outcome.returncode == 0 and not outcome.interrupted:  # a command without torch.distributed
            typer.echo(
                f"collcheck: no traces in {trace_dir} (the command never used torch.distributed)", err=True
            )
            return 0
        found = verdict.no_traces(trace_dir, outcome.returncode)
        typer.echo(found.paragraph, err=True)
        return int(found.status)
    failed = outcome.returncode != 0 or outcome.hung or outcome.interrupted
    if failed or analysis.diverged or analysis.warnings:
        typer.echo(_headline(outcome), err=True)
        typer.echo(render_text(analysis), err=True)
    codes = verdict.rank_exit_codes(trace_dir, exits.read(trace_dir), outcome.returncode)
    end = verdict.JobEnd(outcome.returncode, outcome.hung, outcome.interrupted)
    found = verdict.decide(analysis, end, codes, strict)
    typer.echo(f"\n{found.paragraph}" + ("" if found.status else f"; traces in {trace_dir}"), err=True)
    return int(found.status)


def _headline(outcome: object) -> str:
    from collcheck.runtime.launch import RunOutcome

    assert isinstance(outcome, RunOutcome)
    if outcome.interrupted:
        why = "was interrupted"
    elif outcome.hung:
        why = f"hung and was stopped after {outcome.seconds:.0f}s"
    elif outcome.returncode != 0:
        why = f"exited with status {outcome.returncode}"
    else:
        why = "finished"
    return f"\ncollcheck: the job {why}; cross-rank analysis of the traces:"


def trace_command(
    directory: Annotated[
        Path, typer.Argument(help="A trace directory (collcheck or Flight Recorder dumps).")
    ],
    output_format: Annotated[str, typer.Option("--format", help="text, json or perfetto.")] = "text",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write here; '-' for stdout (perfetto default: DIR/trace.perfetto.json)."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Call-site divergence fails too.")] = False,
) -> None:
    """Analyse recorded traces offline; exit 1 when the ranks diverged."""
    if output_format not in TRACE_FORMATS:
        typer.echo(
            f"collcheck: error: unknown format '{output_format}' (expected text, json or perfetto)", err=True
        )
        raise typer.Exit(2)
    try:
        analysis = analyze(load_dir(str(directory)))
    except TraceError as error:
        typer.echo(f"collcheck: error: {error}", err=True)
        raise typer.Exit(2) from error
    _emit(analysis, output_format, output, directory)
    raise typer.Exit(analysis.exit_code(strict))


def _plural_ranks(analysis: Analysis) -> str:
    count = len(analysis.ranks)
    return (
        f"{count} rank{'' if count == 1 else 's'}, {'ranks diverged' if analysis.diverged else 'consistent'}"
    )


def _emit(analysis: Analysis, output_format: str, output: Path | None, directory: Path) -> None:
    if output_format == "perfetto":
        from collcheck.runtime.perfetto import to_perfetto

        document = json.dumps(to_perfetto(analysis))
        if output == STDOUT:  # `-o -`: the JSON alone on stdout, so `> trace.json` is a valid file
            typer.echo(document)
            typer.echo(
                f"collcheck: {_plural_ranks(analysis)}; open the JSON in https://ui.perfetto.dev", err=True
            )
            return
        target = output or directory / "trace.perfetto.json"
        target.write_text(document, encoding="utf-8")
        typer.echo(f"wrote {target} (open it in https://ui.perfetto.dev)", err=True)
        return
    text = json.dumps(to_json(analysis), indent=2) if output_format == "json" else render_text(analysis)
    if output is not None and output != STDOUT:
        output.write_text(text + "\n", encoding="utf-8")
    else:
        typer.echo(text)
