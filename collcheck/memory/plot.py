"""`--plot FILE.png`: per-rank peak against sequence length, the budget, the plan and alternatives.

matplotlib is an optional extra (`pip install 'collcheck[plot]'`), imported only when plotting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collcheck.memory.formulas import CacheLayout
from collcheck.memory.plan import Estimate, GatherPlan, peak_bytes
from collcheck.memory.units import GIB

POINTS = 200


class PlotError(RuntimeError):
    """Plotting was asked for but cannot be done (matplotlib missing, file not writable)."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never open a window from a command-line tool
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise PlotError("--plot needs matplotlib: pip install 'collcheck[plot]'") from error
    return plt


def curves(est: Estimate) -> list[tuple[str, list[int], list[float]]]:
    """(label, sequence lengths, peak GiB) for the chosen plan and each advised alternative."""
    top = max(est.seq_len, est.max_seq_len or 0) * 5 // 4 or 1
    lengths = sorted({max(1, top * i // POINTS) for i in range(POINTS + 1)})
    options: list[tuple[str, CacheLayout, GatherPlan]] = [("chosen plan", est.layout, est.plan)]
    options += [(advice.flags, advice.layout, advice.plan) for advice in est.advice]
    return [
        (label, lengths, [peak_bytes(n, layout, plan) / GIB for n in lengths])
        for label, layout, plan in options
    ]


def write_plot(est: Estimate, path: Path) -> None:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 5))
    for label, lengths, peaks in curves(est):
        axes.plot(lengths, peaks, label=label)
    if est.budget_bytes is not None:
        axes.axhline(est.budget_bytes / GIB, color="red", linestyle="--", label="budget")
    axes.axvline(est.seq_len, color="grey", linestyle=":", label=f"seq-len {est.seq_len:,}")
    axes.set_xlabel("sequence length (tokens)")
    axes.set_ylabel("peak per rank (GiB)")
    axes.set_title(f"KV all-gather peak: {est.layout.model.name}")
    axes.legend()
    # Drawn in memory, then written as every collcheck output is (collcheck.safe_write): never
    # through a link, replaced atomically. The format follows the name, as savefig(path) would.
    import io

    from collcheck.safe_write import WriteRefused, WriteRoots, write_output

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, dpi=100, format=path.suffix.lstrip(".").lower() or "png")
        write_output(path, buffer.getvalue(), WriteRoots.of(None, [Path(".")]))
    except (ValueError, WriteRefused) as error:
        raise PlotError(f"cannot write {path}: {error}") from error
    except OSError as error:
        raise PlotError(f"cannot write {path}: {error.strerror or error}") from error
    finally:
        plt.close(figure)
