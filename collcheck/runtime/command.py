"""`collcheck run`, `collcheck trace` and `collcheck convert-trace`: thin CLI over launch.py, stream.py
and trace_binary.py."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from collcheck.runtime.liveline import LiveReport
from collcheck.runtime.perfetto import Window
from collcheck.runtime.record import open_output, shared_dir_allowed, write_output
from collcheck.runtime.stream import Until, analyze_dir
from collcheck.runtime.trace_model import Analysis, Problem
from collcheck.runtime.trace_read import PERFETTO_FILE, TraceError
from collcheck.runtime.trace_render import render_text, to_json

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
    trace_format: Annotated[
        str,
        typer.Option(
            "--trace-format",
            help="json (default) or binary: the ranks write collcheck-rank<R>.ccbin records live "
            "(the Python kernel; read by `collcheck trace` like converted traces).",
        ),
    ] = "json",
    print_env: Annotated[
        bool, typer.Option("--print-env", help="Print the environment for launchers collcheck does not wrap.")
    ] = False,
    allow_shared_trace_dir: Annotated[
        bool,
        typer.Option(
            "--allow-shared-trace-dir",
            help="Write traces into a folder every user can write and another user owns "
            "(also COLLCHECK_ALLOW_SHARED_DIR=1).",
        ),
    ] = False,
    allow_untraced: Annotated[
        bool,
        typer.Option(
            "--allow-untraced",
            help="Run the command even when the trace folder cannot be written (default: refuse).",
        ),
    ] = False,
) -> None:
    """Run COMMAND (python script.py, torchrun ...) with the collective tracer in every process."""
    from collcheck.runtime import exits, launch, liveline
    from collcheck.runtime.record import TraceFormat
    from collcheck.runtime.tracer import TraceConfig, config_to_env

    if trace_format not in {kind.value for kind in TraceFormat}:
        typer.echo(f"collcheck: error: --trace-format {trace_format!r}: use json or binary", err=True)
        raise typer.Exit(2)
    config = TraceConfig(
        trace_dir=str(trace_dir),
        verify=verify or strict,
        strict=strict,
        timeout_s=timeout,
        native=native,
        allow_shared_dir=allow_shared_trace_dir or shared_dir_allowed(),
        trace_format=TraceFormat(trace_format),
    )
    env = launch.tracing_env({}, config_to_env(config))
    if print_env:
        for key, value in sorted(env.items()):
            typer.echo(f"export {key}={_shell_value(key, value)}")
        raise typer.Exit(0)
    command = list(ctx.args)
    if not command:
        typer.echo("collcheck: error: no command (usage: collcheck run [OPTIONS] -- COMMAND...)", err=True)
        raise typer.Exit(2)
    why = launch.prepare_trace_dir(str(trace_dir), config.allow_shared_dir)
    if why is not None:
        if not allow_untraced:
            refused = f"collcheck: error: {why}; the job was not started (--allow-untraced runs it)"
            typer.echo(refused, err=True)
            raise typer.Exit(2)
        typer.echo(f"collcheck: warning: {why}; running the job UNTRACED", err=True)
        raise typer.Exit(launch.run(command, dict(os.environ)).exit_status)
    exits.clear(str(trace_dir))
    # No build here: a job never waits for a compiler. Without a build, the ranks record with the
    # Python kernel and local rank 0 starts a detached build for later runs (tracer.py).
    listener = liveline.Listener()  # error reports that a full trace folder cannot lose
    try:
        outcome = launch.run(
            command,
            launch.tracing_env(dict(os.environ), {**config_to_env(config), **listener.env()}),
            trace_dir=str(trace_dir),
            hang_after_s=timeout + HANG_GRACE_S,
        )
    finally:
        live = listener.close()
    raise typer.Exit(_finish(outcome, str(trace_dir), strict, live))


def _shell_value(key: str, value: str) -> str:
    """A quoted shell value; PYTHONPATH keeps the shell's own entries after the boot folder, with
    no empty entry when it has none (an empty entry would put the working directory first)."""
    if key == "PYTHONPATH":
        return shlex.quote(value) + '${PYTHONPATH:+:"$PYTHONPATH"}'
    return shlex.quote(value)


def _finish(outcome: object, trace_dir: str, strict: bool, live: list[LiveReport]) -> int:
    """Print the cross-rank analysis when the job failed, hung, was interrupted or diverged, then
    the one-paragraph verdict, last; return the verdict's status (verdict.py)."""
    from collcheck.runtime import exits, verdict
    from collcheck.runtime.launch import RunOutcome

    assert isinstance(outcome, RunOutcome)
    problems: list[Problem] = []
    try:
        analysis = analyze_dir(trace_dir, problems)
    except TraceError:
        _warn_problems(problems)
        if outcome.returncode == 0 and not outcome.interrupted:  # a command without torch.distributed
            typer.echo(
                f"collcheck: no traces in {trace_dir} (the command never used torch.distributed)", err=True
            )
            return 0
        found = verdict.no_traces(trace_dir, outcome.returncode, outcome.interrupted, outcome.exit_status)
        typer.echo(found.paragraph, err=True)
        return found.code
    failed = outcome.returncode != 0 or outcome.hung or outcome.interrupted
    if failed or analysis.diverged or analysis.warnings or analysis.incomplete:
        typer.echo(_headline(outcome), err=True)
        typer.echo(render_text(analysis), err=True)
    codes = verdict.rank_exit_codes(trace_dir, exits.read(trace_dir), outcome.returncode)
    end = verdict.JobEnd(outcome.returncode, outcome.hung, outcome.interrupted, outcome.exit_status)
    found = verdict.decide(analysis, end, codes, strict, live)
    typer.echo(f"\n{found.paragraph}" + ("" if found.status else f"; traces in {trace_dir}"), err=True)
    return found.code  # interrupted (Ctrl-C, SIGTERM/SIGHUP to collcheck run): 128 + N, as a shell


def _headline(outcome: object) -> str:
    from collcheck.runtime.launch import RunOutcome, signal_name

    assert isinstance(outcome, RunOutcome)
    if outcome.interrupted:
        why = f"was stopped ({signal_name(outcome.returncode - 128)} received) and every process of it ended"
    elif outcome.hung:
        why = f"hung and was stopped after {outcome.seconds:.0f}s (every process of it ended)"
    elif outcome.signal_name is not None:
        why = f"was ended by {outcome.signal_name}"
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
    first: Annotated[
        bool,
        typer.Option(
            "--first",
            help="Stop at the first divergence (with --strict, call-site difference too) and print only it, "
            "reading no further than needed; missing collectives and swaps are not looked for.",
        ),
    ] = False,
    allow_shared_dir: Annotated[
        bool,
        typer.Option(
            "--allow-shared-trace-dir",
            help="Write the output into a folder every user can write and another user owns.",
        ),
    ] = False,
    ranks: Annotated[str | None, typer.Option("--ranks", help="perfetto: only these ranks (0-7,12).")] = None,
    groups: Annotated[
        str | None,
        typer.Option("--groups", help="perfetto: only these groups (0,1; sends and recvs included)."),
    ] = None,
    time_range: Annotated[
        str | None,
        typer.Option(
            "--time", help="perfetto: only START:END seconds from the trace's start (either may be empty)."
        ),
    ] = None,
) -> None:
    """Analyse recorded traces offline.

    Exit status: 0 consistent; 1 the ranks diverged; 2 nothing could be read (or a usage error);
    3 no divergence in what could be read, but some of it could not be (malformed lines, refused
    files, events a tracer could not write).
    """
    if output_format not in TRACE_FORMATS:
        typer.echo(
            f"collcheck: error: unknown format '{output_format}' (expected text, json or perfetto)", err=True
        )
        raise typer.Exit(2)
    try:
        window = parse_window(ranks, groups, time_range)
    except ValueError as error:
        typer.echo(f"collcheck: error: {error}", err=True)
        raise typer.Exit(2) from error
    if first and output_format == "perfetto":
        typer.echo("collcheck: error: --first goes with --format text or json", err=True)
        raise typer.Exit(2)
    if window != Window() and output_format != "perfetto":
        typer.echo("collcheck: error: --ranks, --groups and --time go with --format perfetto", err=True)
        raise typer.Exit(2)
    problems: list[Problem] = []
    try:
        until = Until.END if not first else Until.FIRST_DIVERGENCE if strict else Until.FIRST_MISMATCH
        analysis = analyze_dir(str(directory), problems, until)
    except TraceError as error:
        _warn_problems(problems)
        typer.echo(f"collcheck: error: {error}", err=True)
        raise typer.Exit(2) from error
    if output_format != "text" or output is not None:  # the text report lists them itself
        _warn_problems(problems)
    try:
        _emit(analysis, output_format, output, directory, allow_shared_dir or shared_dir_allowed(), window)
    except OSError as error:  # UnsafeLocation included
        typer.echo(f"collcheck: error: cannot write the output: {error}", err=True)
        raise typer.Exit(2) from error
    raise typer.Exit(analysis.exit_code(strict))


def _warn_problems(problems: list[Problem]) -> None:
    for problem in problems:
        typer.echo(f"collcheck: warning: {problem.where}: {problem.text}", err=True)


def _plural_ranks(analysis: Analysis) -> str:
    count = len(analysis.ranks)
    return (
        f"{count} rank{'' if count == 1 else 's'}, {'ranks diverged' if analysis.diverged else 'consistent'}"
    )


def parse_window(ranks: str | None, groups: str | None, time_range: str | None) -> Window:
    """The Perfetto window from `--ranks 0-7,12`, `--groups 0,1` and `--time 1.5:3`; ValueError
    with the reason when one does not parse."""
    chosen: set[int] | None = None
    if ranks is not None:
        chosen = set()
        for part in filter(None, ranks.split(",")):
            low, dash, high = part.strip().partition("-")
            try:
                first, last = int(low), int(high if dash else low)
            except ValueError:
                raise ValueError(f"--ranks: {part!r} is not a rank or a range like 0-7") from None
            if last - first > 1 << 20:
                raise ValueError(f"--ranks: {part!r} is too wide a range")
            chosen.update(range(first, last + 1))
    names = None if groups is None else frozenset(g.strip() for g in groups.split(",") if g.strip())
    start = end = None
    if time_range is not None:
        low, colon, high = time_range.partition(":")
        try:
            start = float(low) if low.strip() else None
            end = float(high) if colon and high.strip() else None
        except ValueError:
            raise ValueError(f"--time: {time_range!r} is not START:END in seconds") from None
    return Window(None if chosen is None else frozenset(chosen), names, start, end)


def _emit(
    analysis: Analysis,
    output_format: str,
    output: Path | None,
    directory: Path,
    allow_shared: bool,
    window: Window,
) -> None:
    """Print or write the report; files are written as traces are (record.open_output)."""
    if output_format == "perfetto":
        from collcheck.runtime.perfetto import write_perfetto

        if output == STDOUT:  # `-o -`: the JSON alone on stdout, so `> trace.json` is a valid file
            write_perfetto(analysis, sys.stdout, window)
            sys.stdout.write("\n")
            sys.stdout.flush()
            typer.echo(
                f"collcheck: {_plural_ranks(analysis)}; open the JSON in https://ui.perfetto.dev", err=True
            )
            return
        target = output or directory / PERFETTO_FILE
        with os.fdopen(open_output(str(target), allow_shared), "w", encoding="utf-8") as handle:
            write_perfetto(analysis, handle, window)
        typer.echo(f"wrote {target} (open it in https://ui.perfetto.dev)", err=True)
        return
    text = json.dumps(to_json(analysis), indent=2) if output_format == "json" else render_text(analysis)
    if output is not None and output != STDOUT:
        write_output(str(output), text + "\n", allow_shared)
    else:
        typer.echo(text)


def convert_command(
    directory: Annotated[Path, typer.Argument(help="A folder of collcheck traces.")],
    output: Annotated[Path, typer.Argument(help="Where the converted traces go (may be the same folder).")],
    to: Annotated[
        str, typer.Option("--to", help="binary (.ccbin, read fastest) or json (.jsonl).")
    ] = "binary",
    allow_shared_dir: Annotated[
        bool,
        typer.Option(
            "--allow-shared-trace-dir",
            help="Write into a folder every user can write and another user owns.",
        ),
    ] = False,
) -> None:
    """Convert collcheck traces between JSON Lines and the binary format.

    Each `collcheck-rank<R>.jsonl` becomes `collcheck-rank<R>.ccbin` (--to binary), or the other
    way round (--to json). `collcheck trace` reads either; where both are in one folder it reads
    the binary one when it is as new as the JSON lines. Exit status: 0 all converted; 2 nothing
    to convert, a usage error, or an output that cannot be written; 3 some files could not be read.
    """
    from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX
    from collcheck.runtime.trace_binary import (
        BINARY_SUFFIX,
        BinaryFormatError,
        UnreadableSource,
        convert_to_binary,
        convert_to_json,
    )

    if to not in ("binary", "json"):
        typer.echo(f"collcheck: error: unknown format '{to}' (expected binary or json)", err=True)
        raise typer.Exit(2)
    source, target = (TRACE_SUFFIX, BINARY_SUFFIX) if to == "binary" else (BINARY_SUFFIX, TRACE_SUFFIX)
    try:
        names = sorted(
            n
            for n in os.listdir(directory)
            # Only regular files, as `trace` reads: opening a FIFO named like a trace would block.
            if n.startswith(TRACE_PREFIX) and n.endswith(source) and os.path.isfile(directory / n)
        )
    except OSError as error:
        typer.echo(f"collcheck: error: {directory}: {error.strerror or error}", err=True)
        raise typer.Exit(2) from error
    if not names:
        typer.echo(f"collcheck: error: {directory}: no collcheck traces ending {source}", err=True)
        raise typer.Exit(2)
    failed = 0
    for name in names:
        into = output / (name[: -len(source)] + target)
        try:
            if to == "binary":
                convert_to_binary(str(directory / name), str(into), allow_shared_dir or shared_dir_allowed())
            else:
                skipped = convert_to_json(
                    str(directory / name), str(into), allow_shared_dir or shared_dir_allowed()
                )
                if skipped:
                    typer.echo(
                        f"collcheck: warning: {directory / name}: {skipped} records not written back",
                        err=True,
                    )
        except (BinaryFormatError, UnreadableSource) as error:
            typer.echo(f"collcheck: warning: {directory / name}: {error}", err=True)
            failed += 1
        except OSError as error:  # UnsafeLocation included
            typer.echo(f"collcheck: error: cannot write {into}: {error}", err=True)
            raise typer.Exit(2) from error
    typer.echo(
        f"wrote {len(names) - failed} trace{'' if len(names) - failed == 1 else 's'} into {output}", err=True
    )
    raise typer.Exit(3 if failed else 0)
