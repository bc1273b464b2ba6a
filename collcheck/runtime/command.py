"""`collcheck run` and `collcheck trace` (owned by the runtime tracer; placeholder until it lands)."""

from __future__ import annotations

import typer


def run_command() -> None:
    """Run a command with the tracer."""
    typer.echo("collcheck run: not implemented yet", err=True)
    raise typer.Exit(2)


def trace_command() -> None:
    """Analyse traces offline."""
    typer.echo("collcheck trace: not implemented yet", err=True)
    raise typer.Exit(2)
