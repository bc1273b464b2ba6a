"""bench/static_speed.py's own parts that are cheap to check: the `--corpus` argument
(speed_corpora.py), the process tree walk and the resident-set sampler (process_memory.py, on a
small child that starts a grandchild)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import process_memory as pm  # noqa: E402
import speed_corpora as sc  # noqa: E402
import static_speed as ss  # noqa: E402

MB = 1024 * 1024
# A child that holds 60 MB (touched, so resident) and starts a grandchild holding 40 MB; both wait
# long enough for several samples, then end.
HOLDER = """
import subprocess, sys, time
held = b"x" * ({mb} * 1024 * 1024)
child = None
if {grand}:
    grandchild = "import time; held = b'y' * (40 * 1024 * 1024); time.sleep(1.2)"
    child = subprocess.Popen([sys.executable, "-c", grandchild])
time.sleep(1.5)
if child is not None:
    child.wait()
"""


def test_corpus_argument_defaults_to_torch_and_keeps_the_order() -> None:
    assert ss.build_parser().parse_args([]).corpus == "torch"
    assert sc.parse_corpora("torch", []) == ["torch"]
    assert sc.parse_corpora(" vllm, sglang,vllm ", ["sglang", "vllm"]) == ["vllm", "sglang"]
    assert sc.parse_corpora("sglang,torch", ["sglang"]) == ["sglang", "torch"]


@pytest.mark.parametrize("text", ["vlm", "", " , ", "torch,nope"])
def test_unknown_or_empty_corpus_is_an_error_naming_the_known(text: str) -> None:
    with pytest.raises(ValueError, match="known: torch, sglang, vllm"):
        sc.parse_corpora(text, ["vllm", "sglang"])


def test_corpus_names_are_bench_precision_packages_without_torch() -> None:
    names = sc.corpus_packages()
    assert {"vllm", "sglang", "composer"} <= set(names)
    assert "torch" not in names


def test_descendants_walks_the_whole_tree_and_nothing_else() -> None:
    parents = {10: 1, 11: 10, 12: 10, 13: 11, 20: 1, 21: 20}
    assert sorted(pm.descendants(10, parents)) == [10, 11, 12, 13]
    assert pm.descendants(99, parents) == [99]


def test_sampler_sums_the_process_tree_and_keeps_the_largest_process(tmp_path: Path) -> None:
    command = [sys.executable, "-c", HOLDER.format(mb=60, grand=True)]
    wall, cpu, completed, _, peak = pm.timed_sampled(command, tmp_path, timeout=60, interval=0.05)
    assert completed.returncode == 0, completed.stderr
    assert peak.samples >= 5
    # 60 MB in the child, 40 MB in the grandchild at the same time, plus two interpreters.
    assert peak.largest_kb * 1024 >= 60 * MB
    assert peak.total_kb * 1024 >= 100 * MB
    assert peak.total_kb < 400 * 1024  # nothing outside the tree (the test runner) is counted
    # The held bytes are private pages: the proportional sum holds them too, and never exceeds the RSS sum.
    assert 100 * MB <= peak.proportional_kb * 1024 <= peak.total_kb * 1024
    assert wall >= 1.5 and cpu > 0


def test_sampler_without_a_grandchild_counts_one_process(tmp_path: Path) -> None:
    command = [sys.executable, "-c", HOLDER.format(mb=30, grand=False)]
    *_, peak = pm.timed_sampled(command, tmp_path, timeout=60, interval=0.05)
    assert 30 * MB <= peak.total_kb * 1024 < 90 * MB
    assert peak.largest_kb == peak.total_kb


def test_sampler_stops_a_child_past_its_timeout(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(30)"]
    with pytest.raises(subprocess.TimeoutExpired):
        pm.timed_sampled(command, tmp_path, timeout=0.5, interval=0.05)


def test_memory_goal_takes_the_largest_tree_sum_of_the_scope() -> None:
    def measured(scope: str, name: str, rss: float | None) -> ss.Measurement:
        return ss.Measurement(scope, name, peak_rss_mb=rss, largest_process_mb=rss, peak_pss_mb=rss)

    results = [
        measured("vllm", "collcheck cold", 520.0),
        measured("vllm", "collcheck warm", 30.0),
        measured("sglang", "collcheck cold", 390.0),
        measured("other", "collcheck cold", 900.0),
        measured("torchrec", "libcst parse-only", None),
    ]
    verdicts = sc.check_memory_goals(results, ["vllm", "sglang", "torchrec"])
    assert [(v["status"], v.get("peak_rss_mb"), v.get("run")) for v in verdicts] == [
        ("MISS", 520.0, "collcheck cold"),
        ("PASS", 390.0, "collcheck cold"),
        ("not measured", None, None),
    ]
