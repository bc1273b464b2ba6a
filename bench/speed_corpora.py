"""The large trees bench/static_speed.py measures besides torch (`--corpus`, issue 26), and their goals.

In: the `--corpus` text; a corpus name. Out: the names, checked against the pinned packages of
corpus.py (those of bench/precision.py; torch is the installed tree, measured by static_speed
itself); the unpacked package folder of a corpus (corpus.fetch at its pinned version, into the
bench cache); the verdicts of the memory goal on the measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from corpus import CACHE, PINNED_PACKAGES, PackageSpec, fetch

CORPUS_COLD_GOAL = 0.3  # issue 26: cold <= 0.3x libcst parse-only on a large tree ...
CORPUS_RSS_GOAL_MB = 400.0  # ... with a peak resident set (collcheck and its workers) of at most this
TORCH = "torch"


class Sampled(Protocol):
    """What the memory goal reads of a measurement (static_speed.Measurement)."""

    scope: str
    name: str
    peak_rss_mb: float | None
    largest_process_mb: float | None
    peak_pss_mb: float | None


def check_memory_goals(results: Sequence[Sampled], scopes: list[str]) -> list[dict[str, object]]:
    """Peak RSS of each scope's collcheck runs (the largest process-tree sum) against the goal."""
    verdicts: list[dict[str, object]] = []
    for scope in scopes:
        peaks = [m for m in results if m.scope == scope and m.peak_rss_mb is not None]
        goal = f"{scope} peak RSS <= {CORPUS_RSS_GOAL_MB:.0f} MB"
        if not peaks:
            verdicts.append({"goal": goal, "status": "not measured"})
            continue
        worst = max(peaks, key=lambda m: m.peak_rss_mb or 0.0)
        assert worst.peak_rss_mb is not None
        verdicts.append(
            {
                "goal": goal,
                "peak_rss_mb": worst.peak_rss_mb,
                "largest_process_mb": worst.largest_process_mb,
                "peak_pss_mb": worst.peak_pss_mb,
                "run": worst.name,
                "status": "PASS" if worst.peak_rss_mb <= CORPUS_RSS_GOAL_MB else "MISS",
            }
        )
    for verdict in verdicts:
        if "peak_rss_mb" in verdict:
            peak, largest = verdict["peak_rss_mb"], verdict["largest_process_mb"]
            print(
                f"{verdict['status']!s:5} {verdict['goal']!s:44} measured {peak:.0f} MB "
                f"(process tree; largest process {largest:.0f} MB; PSS {verdict['peak_pss_mb']:.0f} MB; "
                f"{verdict['run']})"
            )
        else:
            print(f"{'-':5} {verdict['goal']!s:44} {verdict['status']}")
    return verdicts


def parse_corpora(text: str, known: list[str]) -> list[str]:
    """The `--corpus` names, in order, without repeats; an unknown one is an error naming the known."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name != TORCH and name not in known]
    if not names or unknown:
        raise ValueError(f"unknown corpus {unknown or text!r}; known: {', '.join([TORCH, *sorted(known)])}")
    return names


def corpus_packages() -> dict[str, PackageSpec]:
    """The pinned packages by name (corpus.PINNED_PACKAGES, those of bench/precision.py), torch left
    out (measured from the installed tree)."""
    return {spec.name: spec for spec in PINNED_PACKAGES if spec.name != TORCH}


def fetch_corpus(name: str, specs: dict[str, PackageSpec]) -> tuple[Path, str]:
    """The unpacked package folder of corpus `name` (fetched once into the bench cache) and its source."""
    return fetch(specs[name], CACHE)
