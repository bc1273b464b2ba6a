"""The command line through `collcheck.cli.main(argv) -> int`: the default command, rule selection,
the JSON contract, the output options, the rule documentation and the exit codes (0/1/2)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_support import BUG, FIXED, LOOP_BUG, RANK2, located, run, run_json

from collcheck import __version__
from collcheck.checks import all_rules, rule_by_code


@pytest.fixture
def bug(tmp_path: Path) -> Path:
    return Path(shutil.copy(BUG, tmp_path / "bug.py"))


@pytest.fixture
def rank2(tmp_path: Path) -> Path:
    path = tmp_path / "rank2.py"
    path.write_text(RANK2)
    return path


# --- the default command -------------------------------------------------------------------------


def test_path_alone_means_check(capsys: pytest.CaptureFixture[str], bug: Path) -> None:
    implicit = run(capsys, "--no-cache", "--format", "json", str(bug))
    explicit = run(capsys, "check", "--no-cache", "--format", "json", str(bug))

    assert implicit == explicit
    assert implicit[0] == 1
    assert located(json.loads(implicit[1])) == [("bug.py", "CC001", 11)]


def test_options_before_the_path_also_mean_check(capsys: pytest.CaptureFixture[str], bug: Path) -> None:
    code, data = run_json(capsys, "--select", "CC001", str(bug))

    assert code == 1
    assert located(data) == [("bug.py", "CC001", 11)]


def test_check_without_paths_checks_the_current_folder(
    capsys: pytest.CaptureFixture[str], bug: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(bug.parent)

    code, out, _ = run(capsys, "check", "--no-cache", "--format", "json")
    data = json.loads(out)

    assert code == 1
    assert data["errors"] == []
    assert [(f["path"], f["code"], f["line"]) for f in data["findings"]] == [("bug.py", "CC001", 11)]


def test_clean_file_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fixed = shutil.copy(FIXED, tmp_path / "fixed.py")

    code, data = run_json(capsys, str(fixed))

    assert code == 0
    assert data["findings"] == [] and data["errors"] == []


# --- the JSON contract ---------------------------------------------------------------------------


def test_json_contract(capsys: pytest.CaptureFixture[str], bug: Path) -> None:
    code, data = run_json(capsys, str(bug))

    assert code == 1
    assert {"findings", "errors", "unused_suppressions", "budget_cuts", "summary"} <= set(data)
    assert data["errors"] == [] and data["unused_suppressions"] == []
    assert data["summary"] == {
        "files": 1,
        "findings": 1,
        "errors": 0,
        "budget_cuts": 0,
        "by_code": {"CC001": 1},
    }
    (finding,) = data["findings"]
    assert {"code", "severity", "path", "line", "column", "end_line", "end_column", "message"} <= set(finding)
    assert finding["code"] == "CC001"
    assert finding["severity"] == rule_by_code("CC001").severity.value == "error"
    assert finding["path"] == str(bug)
    assert (finding["line"], finding["column"]) == (11, 9)  # columns are 1-based in reports
    assert finding["end_line"] >= finding["line"]
    assert isinstance(finding["end_column"], int)
    assert isinstance(finding["message"], str) and finding["message"]
    example = finding["counterexample"]
    assert example["world_size"] == 2
    assert set(example["ranks"]) == {"0", "1"}
    assert [(s["op"], s["line"]) for s in example["ranks"]["0"]] == [("barrier", 11)]
    assert example["ranks"]["1"] == []


def test_json_error_entry_has_path_and_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch.distributed as dist\ndef f(:\n    dist.barrier()\n")

    code, data = run_json(capsys, str(bad))

    assert code == 1
    (error,) = data["errors"]
    assert error["path"] == str(bad)
    assert error["line"] == 2
    assert error["message"]
    assert data["summary"]["errors"] == 1


# --- selection -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ((), [("bug.py", "CC001", 11), ("loop.py", "CC002", 9)]),
        (("--select", "CC001"), [("bug.py", "CC001", 11)]),
        (("--select", "cc002"), [("loop.py", "CC002", 9)]),
        (("--select", "CC0"), [("bug.py", "CC001", 11), ("loop.py", "CC002", 9)]),
        (("--select", "CC001,CC002"), [("bug.py", "CC001", 11), ("loop.py", "CC002", 9)]),
        (("--select", "CC1"), []),
        (("--ignore", "CC001"), [("loop.py", "CC002", 9)]),
        (("--ignore", "CC0"), []),
        (("--ignore", "CC002, CC001"), []),
        (("--select", "CC0", "--ignore", "CC002"), [("bug.py", "CC001", 11)]),
    ],
)
def test_select_and_ignore(
    capsys: pytest.CaptureFixture[str], bug: Path, options: tuple[str, ...], expected: list[Any]
) -> None:
    loop = shutil.copy(LOOP_BUG, bug.parent / "loop.py")

    code, data = run_json(capsys, *options, str(bug), str(loop))

    assert located(data) == expected
    assert code == (1 if expected else 0)
    assert data["summary"]["files"] == 2


def test_select_of_an_unknown_code_is_a_usage_error(capsys: pytest.CaptureFixture[str], bug: Path) -> None:
    code, out, err = run(capsys, "--no-cache", "--select", "CC999", str(bug))

    assert code == 2
    assert out == ""
    assert "CC999" in err


# --- world size ----------------------------------------------------------------------------------


def test_world_size_limits_the_counterexample(capsys: pytest.CaptureFixture[str], rank2: Path) -> None:
    _, default = run_json(capsys, str(rank2))
    code_2, two = run_json(capsys, "--world-size", "2", str(rank2))
    code_3, three = run_json(capsys, "--world-size", "3", str(rank2))
    _, eight = run_json(capsys, "--world-size", "8", str(rank2))

    assert located(default) == [("rank2.py", "CC001", 6)]
    assert (code_2, two["findings"]) == (0, [])
    assert code_3 == 1
    assert located(three) == [("rank2.py", "CC001", 6)]
    assert three["findings"][0]["counterexample"]["world_size"] == 3
    assert "2" in three["findings"][0]["counterexample"]["ranks"]
    assert eight["findings"][0]["counterexample"]["world_size"] == 8


@pytest.mark.parametrize("value", ["1", "0", "two"])
def test_bad_world_size_is_a_usage_error(capsys: pytest.CaptureFixture[str], bug: Path, value: str) -> None:
    code, out, err = run(capsys, "--no-cache", "--world-size", value, str(bug))

    assert code == 2
    assert "world-size" in err
    assert out == ""


# --- output options ------------------------------------------------------------------------------


def test_statistics_counts_per_code(capsys: pytest.CaptureFixture[str], bug: Path) -> None:
    shutil.copy(BUG, bug.parent / "bug_copy.py")
    shutil.copy(LOOP_BUG, bug.parent / "loop.py")

    code, out, _ = run(capsys, "--no-cache", "--statistics", "--format", "concise", str(bug.parent))

    assert code == 1
    counts = dict((m[2], int(m[1])) for m in re.finditer(r"^\s*(\d+)\t(CC\d{3})$", out, re.MULTILINE))
    assert counts == {"CC001": 2, "CC002": 1}


def test_exit_zero_still_reports(capsys: pytest.CaptureFixture[str], bug: Path) -> None:
    code, out, _ = run(capsys, "--no-cache", "--exit-zero", "--format", "json", str(bug))

    assert code == 0
    assert located(json.loads(out)) == [("bug.py", "CC001", 11)]


def test_exit_zero_with_an_unanalysable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"dist.barrier\x00")

    assert run(capsys, "--no-cache", str(bad))[0] == 1
    assert run(capsys, "--no-cache", "--exit-zero", str(bad))[0] == 0


@pytest.mark.parametrize("flag", ["-o", "--output"])
def test_output_file(capsys: pytest.CaptureFixture[str], bug: Path, tmp_path: Path, flag: str) -> None:
    report = tmp_path / "report.json"

    code, out, _ = run(capsys, "--no-cache", "--format", "json", flag, str(report), str(bug))
    _, direct, _ = run(capsys, "--no-cache", "--format", "json", str(bug))

    assert code == 1
    assert out == ""
    assert json.loads(report.read_text(encoding="utf-8")) == json.loads(direct)


@pytest.mark.parametrize("fmt", ["text", "concise", "json", "sarif", "github", "junit"])
def test_every_format_renders(capsys: pytest.CaptureFixture[str], bug: Path, fmt: str) -> None:
    code, out, _ = run(capsys, "--no-cache", "--format", fmt, str(bug))

    assert code == 1
    assert out.strip()


# --- rules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["CC001", "cc001"])
def test_rule_prints_its_doc(capsys: pytest.CaptureFixture[str], spelling: str) -> None:
    rule = rule_by_code("CC001")

    code, out, _ = run(capsys, "rule", spelling)

    assert code == 0
    assert out.splitlines()[0].startswith(f"# CC001 {rule.name} ")
    assert rule.doc.strip() in out


def test_every_rule_has_a_doc(capsys: pytest.CaptureFixture[str]) -> None:
    for rule in all_rules():
        code, out, _ = run(capsys, "rule", rule.code)
        assert code == 0
        assert rule.doc.strip() and rule.doc.strip() in out


@pytest.mark.parametrize("code_arg", ["CC999", "E501", ""])
def test_unknown_rule_exits_2(capsys: pytest.CaptureFixture[str], code_arg: str) -> None:
    code, out, err = run(capsys, "rule", code_arg)

    assert code == 2
    assert out == ""
    assert f"'{code_arg}'" in err


def test_rules_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "rules")

    assert code == 0
    listed = [line.split() for line in out.splitlines() if line.strip() and not line.startswith(" ")]
    assert [fields[0] for fields in listed] == [rule.code for rule in all_rules()]
    # what --help promises: each rule's status, and its summary on the next line
    assert all(fields[3] == rule.status for fields, rule in zip(listed, all_rules(), strict=True))
    summaries = [line.strip() for line in out.splitlines() if line.startswith(" ")]
    assert summaries == [rule.summary for rule in all_rules()]


def test_rules_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "rules", "--format", "json")

    assert code == 0
    rules = json.loads(out)
    assert [item["code"] for item in rules] == [rule.code for rule in all_rules()]
    assert {item["code"]: item["default"] for item in rules} == {
        rule.code: rule.default_enabled for rule in all_rules()
    }


# --- usage errors and version --------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("--bogus", "x.py"),
        ("check", "--bogus"),
        ("--format", "xml", "x.py"),
        ("--jobs", "0", "x.py"),
        ("-j", "many", "x.py"),
        ("--z3-rlimit", "soon", "x.py"),
        ("rules", "--bogus"),
        ("rule",),
    ],
    ids=lambda argv: " ".join(argv),
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, out, err = run(capsys, *argv)

    assert code == 2
    assert err.strip()
    assert out == ""


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--version") == (0, f"collcheck {__version__}\n", "")
    assert run(capsys, "version") == (0, f"collcheck {__version__}\n", "")


@pytest.mark.parametrize(
    "argv",
    [["check", str(BUG), "--no-cache"], ["rules"], ["--version"]],
    ids=["light check", "a typer command", "version"],
)
def test_a_reader_that_closes_the_pipe_gets_no_traceback(argv: list[str]) -> None:
    """`collcheck check src | head`: the reader is gone before the output is written. Typer
    handles a closed pipe itself (exit 1, which means findings here): the same 141 either way."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "collcheck", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before anything is written: the first write meets a closed pipe
    errors = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141
    assert "Traceback" not in errors and "BrokenPipe" not in errors
