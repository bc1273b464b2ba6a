"""A few seconds of bench/fuzz_traces.py: mutated real traces never crash, hang or exit oddly."""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType

import pytest
from conftest import bench_module

from collcheck.runtime.analyze import analyze
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import EXIT_INCOMPLETE
from collcheck.runtime.trace_render import render_text


def _fuzzer() -> ModuleType:
    return bench_module("fuzz_traces")


def test_mutated_trace_folders_never_crash_hang_or_exit_outside_0_to_3() -> None:
    ran, failures, statuses = _fuzzer().fuzz(cases=400, seed=2026, limit_s=10.0, budget_s=8.0)
    assert not failures, "\n".join(failures[:5])
    assert ran >= 40  # slow machine: still a real number of cases
    assert len(statuses) >= 3  # the mutations reach consistent, diverged and incomplete results


@pytest.mark.parametrize("schema", [1, 2])
def test_each_malformed_line_is_skipped_and_named_and_the_rest_analysed(tmp_path: Path, schema: int) -> None:
    fuzz = _fuzzer()
    seed = fuzz.SEEDS[0] if schema == 1 else fuzz.SEEDS[2]
    bad = [b"42", b"\xff\xfe", b'{"ev": "coll", "seq": "x"}', b"[" * 100_000 + b"]" * 100_000]
    bad += [b'{"ev": "coll", "rank": 1e999}', b'{"ev":"done","group":"0","seq":' + b"9" * 5000 + b"}"]
    for source in seed.iterdir():
        lines = source.read_bytes().split(b"\n")
        if source.name.endswith("rank1.jsonl"):
            lines[3:3] = bad  # after the header, the lost line and the first collective (or group) line
        (tmp_path / source.name).write_bytes(b"\n".join(lines))
    analysis = analyze(load_dir(str(tmp_path)))
    clean = analyze(load_dir(str(seed)))
    assert analysis.unreadable == len(bad)
    assert [p.line for p in analysis.problems] == list(range(4, 4 + len(bad)))
    assert all(p.path.endswith("collcheck-rank1.jsonl") for p in analysis.problems)
    assert analysis.groups == clean.groups and analysis.divergences == clean.divergences
    assert analysis.exit_code() == EXIT_INCOMPLETE
    text = render_text(analysis)
    assert "collcheck-rank1.jsonl:4: not a JSON object (int)" in text
    assert "unreadable lines skipped" in text and "result: consistent" not in text


def test_the_fuzzer_mutations_are_reproducible(tmp_path: Path) -> None:
    fuzz = _fuzzer()
    first = fuzz.build_case(random.Random(5), tmp_path / "a")
    second = fuzz.build_case(random.Random(5), tmp_path / "b")
    assert first == second
    assert sorted(p.read_bytes() for p in (tmp_path / "a").iterdir()) == sorted(
        p.read_bytes() for p in (tmp_path / "b").iterdir()
    )
