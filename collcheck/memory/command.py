"""`collcheck estimate` (owned by the memory estimator; placeholder until it lands)."""

from __future__ import annotations

import typer


def estimate_command() -> None:
    """Estimate per-rank KV-cache and all-gather memory."""
    typer.echo("collcheck estimate: not implemented yet", err=True)
    raise typer.Exit(2)
