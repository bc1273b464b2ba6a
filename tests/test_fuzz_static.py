"""A bounded fuzz run in the suite: mutated fixture programs and model configs never make
`collcheck check` or `collcheck estimate` raise, hang or exit with an unexpected status.
The soak version, with thousands of cases, is `python bench/fuzz_static.py`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_fuzzer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_static", REPO / "bench" / "fuzz_static.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_static"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzzer()
CASES = fuzz.cases_per_mutation(per=2, seed=20261201)
CASE_TIMEOUT = 60.0  # generous: a loaded CI machine; a real hang runs far past it
FILE_TIMEOUT = 3.0


def test_the_sample_covers_every_mutation() -> None:
    kinds = {(case.kind, case.mutation) for case in CASES}
    expected = {("source", name) for name in fuzz.SOURCE_MUTATIONS}
    expected |= {("config", name) for name in fuzz.CONFIG_MUTATIONS}
    assert kinds == expected
    assert fuzz.make_cases(20, seed=3) == fuzz.make_cases(20, seed=3)  # reproducible from the seed


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case.name for case in CASES])
def test_mutated_input_in_process(tmp_path: Path, index: int) -> None:
    outcome = fuzz.run_in_process(CASES[index], tmp_path, index, CASE_TIMEOUT, FILE_TIMEOUT)
    assert outcome.problem is None, outcome.problem


@pytest.mark.parametrize("index", [0, len(CASES) - 1], ids=["source", "config"])
def test_mutated_input_in_a_subprocess(tmp_path: Path, index: int) -> None:
    outcome = fuzz.run_in_subprocess(CASES[index], tmp_path, index, CASE_TIMEOUT, FILE_TIMEOUT)
    assert outcome.problem is None, outcome.problem


def test_the_soak_script_runs_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "out.json"
    code = fuzz.main(["--cases", "4", "--seed", "5", "--subprocess-every", "0", "--json", str(report)])
    assert code == 0, capsys.readouterr().out
    assert "4 runs, 0 failures" in capsys.readouterr().out
    assert report.is_file()
