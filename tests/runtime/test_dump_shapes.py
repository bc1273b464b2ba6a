"""A Flight Recorder dump's decoded shape is bounded before anything formats it (issue 27, item
3): a 600-byte pickle of lists sharing one inner list spells out 2**N leaves through `str()`."""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, base_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_analyze import _fr_dump, _fr_entry

from collcheck.runtime import fr_read
from collcheck.runtime.analyze import analyze
from collcheck.runtime.fr_read import check_dump_shape
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Problem
from collcheck.runtime.trace_read import DumpRefused, TraceError


def _shared_nest(depth: int) -> list[Any]:
    """[x, x] with x = [y, y] ... : depth+1 distinct lists, 2**depth leaves spelled out."""
    inner: list[Any] = []
    for _ in range(depth):
        inner = [inner, inner]
    return inner


def _dump_with(value: Any, field: str = "profiling_name") -> dict[str, object]:
    entry = _fr_entry(1, "all_reduce", [[8]], 5)
    entry[field] = value
    return _fr_dump([entry])


def test_the_reported_pickle_is_small_and_refused_quickly(tmp_path: Path) -> None:
    data = pickle.dumps(_dump_with(_shared_nest(60)), protocol=2)
    assert len(data) < 2000
    (tmp_path / "nccl_trace_rank_0").write_bytes(data)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "collcheck", "trace", str(tmp_path)],
        env=base_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,  # before the bound: unbounded time and memory at depth 60 (75 s at depth 26)
    )
    assert time.monotonic() - started < 30
    assert "Traceback" not in done.stderr
    assert "holds more than" in done.stderr and "not unpickled" not in done.stderr


@pytest.mark.parametrize(
    "field", ["profiling_name", "thread_name", "process_group", "frames", "input_dtypes"]
)
def test_a_non_text_field_is_never_formatted(
    tmp_path: Path, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Within the node bound (depth 24: 16M leaves), a nest in a text field is not spelled out.
    (tmp_path / "nccl_trace_rank_0").write_bytes(
        pickle.dumps(_dump_with(_shared_nest(24), field), protocol=4)
    )
    problems: list[Problem] = []
    started = time.monotonic()
    analyze(load_dir(str(tmp_path), problems), problems)
    assert time.monotonic() - started < 2  # str() of the nest alone takes longer


def test_depth_and_cycles_are_refused() -> None:
    deep: list[Any] = []
    for _ in range(fr_read.MAX_DUMP_DEPTH + 1):
        deep = [deep]
    with pytest.raises(DumpRefused, match="deeper"):
        check_dump_shape({"entries": deep})
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(DumpRefused, match="contains itself"):
        check_dump_shape({"entries": [cycle]})


def test_a_real_sized_dump_passes_the_bound() -> None:
    entries = [_fr_entry(seq, "all_reduce", [[8, 4]], 5) for seq in range(1, 2001)]  # FR's default ring
    check_dump_shape(_fr_dump(entries))


def _nested_shared(draw: st.DrawFn) -> Any:
    """A random nest of lists, tuples and dicts whose containers may be shared, as a memo allows."""
    pool: list[Any] = ["a", 1, 2.5, None, True]
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["list", "tuple", "dict"]))
        picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=0, max_size=4))
        members = [pool[i] for i in picks]
        if kind == "list":
            pool.append(members)
        elif kind == "tuple":
            pool.append(tuple(members))
        else:
            pool.append({f"k{i}": member for i, member in enumerate(members)})
    return pool[-1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.composite(_nested_shared)(), field=st.sampled_from(["profiling_name", "frames", "entries"]))
def test_fuzzed_shared_nests_load_in_bounded_time(
    tmp_path_factory: pytest.TempPathFactory, value: Any, field: str
) -> None:
    folder = tmp_path_factory.mktemp("fr")
    dump: Any = (
        {"entries": value, "pg_config": {}, "rank": 0} if field == "entries" else _dump_with(value, field)
    )
    (folder / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump, protocol=2))
    started = time.monotonic()
    problems: list[Problem] = []
    with contextlib.suppress(TraceError):  # nothing readable in the folder: said, not a traceback
        analyze(load_dir(str(folder), problems), problems)
    assert time.monotonic() - started < 5
