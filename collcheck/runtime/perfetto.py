"""Chrome/Perfetto trace JSON: one track per rank, collectives as slices, divergences marked.

The Trace Event format (`traceEvents` with `ph: "X"` complete slices, `ph: "i"` instants and
`ph: "M"` metadata) opens in ui.perfetto.dev and chrome://tracing.
"""

from __future__ import annotations

from typing import Any

from collcheck.runtime.analyze import Analysis


def to_perfetto(analysis: Analysis) -> dict[str, Any]:
    starts = [event.t_start for events in analysis.events.values() for event in events]
    origin = min(starts) if starts else 0.0
    end = max([e.t_end or e.t_start for events in analysis.events.values() for e in events], default=origin)
    trace: list[dict[str, Any]] = []
    for rank in analysis.ranks:
        trace.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        trace.extend(_slice(event, origin, end) for event in analysis.events.get(rank, ()))
    trace.extend(_marks(analysis, origin))
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


def _us(seconds: float, origin: float) -> float:
    return round((seconds - origin) * 1e6, 3)


def _slice(event: Any, origin: float, end: float) -> dict[str, Any]:
    finished = event.t_end is not None
    stop = event.t_end if finished else end  # never completed: runs to the end of the trace
    return {
        "ph": "X",
        "name": event.describe,
        "cat": "collective" if finished else "collective,incomplete",
        "pid": event.rank,
        "tid": 0,
        "ts": _us(event.t_start, origin),
        "dur": max(_us(stop, origin) - _us(event.t_start, origin), 1.0),
        "args": {
            "group": event.group,
            "seq": event.seq,
            "site": event.site.short,
            "stack": list(event.site.stack),
            "thread": event.thread,
            "completed": finished,
        },
    }


def _marks(analysis: Analysis, origin: float) -> list[dict[str, Any]]:
    marks = []
    for divergence in analysis.divergences:
        for ranks in divergence.ranks:
            for rank in ranks:
                event = _find(analysis, rank, divergence.group, divergence.seq)
                if event is not None:
                    marks.append(_instant(rank, event.t_start, origin, divergence.kind, divergence.text))
    for finding in analysis.p2p:
        for rank, seq in finding.events:
            event = _find(analysis, rank, finding.group, seq)
            if event is not None:
                marks.append(_instant(rank, event.t_start, origin, f"p2p {finding.kind}", finding.text))
    for item in analysis.missing:
        for rank in item.ranks:
            events = analysis.events.get(rank) or []
            at = max((e.t_end or e.t_start for e in events), default=origin)
            marks.append(_instant(rank, at, origin, "never issued", item.text))
    return marks


def _instant(rank: int, at: float, origin: float, kind: str, text: str) -> dict[str, Any]:
    return {
        "ph": "i",
        "s": "p",
        "name": f"DIVERGENCE: {kind}",
        "pid": rank,
        "tid": 0,
        "ts": _us(at, origin),
        "args": {"detail": text},
    }


def _find(analysis: Analysis, rank: int, group: str, seq: int) -> Any:
    for event in analysis.events.get(rank, ()):
        if event.group == group and event.seq == seq:
            return event
    return None
