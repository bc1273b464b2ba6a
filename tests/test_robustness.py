"""Robust on bad input: every file that cannot be analysed is one entry in `errors`, the rest of the
run goes on, and the exit code is 1. Nothing escapes as a traceback, nothing hangs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import z3

from collcheck import __version__
from collcheck import source as source_module
from collcheck.api import check_paths
from collcheck.cli import main
from collcheck.config import Settings

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
BUG = FIXTURES / "CC001" / "barrier_rank0_bug.py"  # CC001 at line 11
BUG_FINDING = ("bug.py", "CC001", 11)
HEADER = "import torch.distributed as dist\n"


def check_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", "--no-cache", "--format", "json", *argv])
    captured = capsys.readouterr()
    return code, json.loads(captured.out)


def findings(data: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(Path(f["path"]).name, f["code"], f["line"]) for f in data["findings"]]


def errors(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    by_name = {Path(e["path"]).name: e for e in data["errors"]}
    assert len(by_name) == len(data["errors"]), f"one error per file expected: {data['errors']}"
    for error in data["errors"]:
        assert isinstance(error["message"], str) and error["message"].strip(), error
    return by_name


def with_bug(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(BUG, folder / "bug.py"))


# --- one bad file next to a good one -------------------------------------------------------------

BAD_INPUTS: dict[str, bytes] = {
    # a syntax error in a file that names a collective, so the prefilter lets it through
    "syntax.py": b"import torch.distributed as dist\ndef f(:\n    dist.all_reduce(x)\n",
    # latin-1 bytes without a coding cookie: not UTF-8
    "latin.py": b"import torch.distributed as dist\n# caf\xe9 \xff\xfe\ndist.all_reduce(x)\n",
    # a coding cookie that names no codec
    "cookie.py": b"# -*- coding: no-such-codec -*-\nimport torch.distributed as dist\ndist.barrier()\n",
    # a binary file named .py
    "binary.py": b"\x7fELF\x02\x01\x01\x00\x00\x00dist.all_reduce\x00\x00\xff\xfe",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_file_is_one_error_and_the_rest_is_analysed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    bug = with_bug(tmp_path)
    bad = tmp_path / name
    bad.write_bytes(BAD_INPUTS[name])

    code, data = check_json(capsys, str(bad), str(bug))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert list(errors(data)) == [name]
    assert data["summary"]["files"] == 2
    assert data["summary"]["errors"] == 1


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_file_alone_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    bad = tmp_path / name
    bad.write_bytes(BAD_INPUTS[name])

    code, data = check_json(capsys, str(bad))

    assert code == 1
    assert data["findings"] == []
    assert list(errors(data)) == [name]


def test_syntax_error_reports_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "syntax.py"
    bad.write_bytes(BAD_INPUTS["syntax.py"])

    _, data = check_json(capsys, str(bad))

    assert data["errors"][0]["line"] == 2
    assert data["errors"][0]["path"] == str(bad)


def test_text_format_names_the_unanalysable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "binary.py"
    bad.write_bytes(BAD_INPUTS["binary.py"])

    code = main(["check", "--no-cache", "--format", "concise", str(bad)])
    out = capsys.readouterr().out

    assert code == 1
    assert any(line.startswith(f"{bad}: error: ") for line in out.splitlines()), out


def test_latin1_with_a_coding_cookie_is_analysed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control for latin.py: the same bytes are fine once the file declares its encoding."""
    good = tmp_path / "declared.py"
    good.write_bytes(
        b"# -*- coding: latin-1 -*-\nimport torch.distributed as dist\n# caf\xe9\n\n\n"
        b"def f(rank):\n    if rank == 0:\n        dist.barrier()\n"
    )

    code, data = check_json(capsys, str(good))

    assert data["errors"] == []
    assert findings(data) == [("declared.py", "CC001", 8)]
    assert code == 1


def test_utf8_bom_is_analysed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "bom.py"
    good.write_bytes(b"\xef\xbb\xbf" + BUG.read_bytes())

    _, data = check_json(capsys, str(good))

    assert data["errors"] == []
    assert findings(data) == [("bom.py", "CC001", 11)]


def test_empty_file_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.py"
    empty.write_bytes(b"")

    code, data = check_json(capsys, str(empty))

    assert code == 0
    assert data["findings"] == [] and data["errors"] == []
    assert data["summary"]["files"] == 1


def test_missing_path_is_an_error_and_the_rest_is_analysed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bug = with_bug(tmp_path)
    missing_file = tmp_path / "nothere.py"
    missing_folder = tmp_path / "no_such_folder"

    code, data = check_json(capsys, str(missing_file), str(bug), str(missing_folder))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert sorted(errors(data)) == ["no_such_folder", "nothere.py"]


def test_missing_path_alone_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = check_json(capsys, str(tmp_path / "nothere.py"))

    assert code == 1
    assert list(errors(data)) == ["nothere.py"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads chmod 000 files")
def test_unreadable_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bug = with_bug(tmp_path)
    locked = tmp_path / "locked.py"
    locked.write_text(HEADER + "dist.barrier()\n")
    locked.chmod(0)
    try:
        code, data = check_json(capsys, str(tmp_path))
    finally:
        locked.chmod(0o644)

    assert code == 1
    assert findings(data) == [(bug.name, "CC001", 11)]
    assert list(errors(data)) == ["locked.py"]


def test_permission_denied_is_an_error_even_as_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same path as above where chmod cannot block root: the read itself is refused."""
    with_bug(tmp_path)
    locked = tmp_path / "locked.py"
    locked.write_text(HEADER + "dist.barrier()\n")
    real_read = source_module.read_regular_file

    def refuse(path: Path | str, max_bytes: int, *, follow_links: bool = True) -> bytes:
        if Path(path).name == "locked.py":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path, max_bytes, follow_links=follow_links)

    monkeypatch.setattr(source_module, "read_regular_file", refuse)

    code, data = check_json(capsys, "-j", "1", str(tmp_path))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert list(errors(data)) == ["locked.py"]


# --- size ----------------------------------------------------------------------------------------


def test_huge_generated_file_finishes(tmp_path: Path) -> None:
    """100k generated lines and one collective: analysed, in a bounded time, by a process that exits.

    (Linear: about 60 us a line; 200k lines took 11-19 s on a loaded 16-core machine.)"""
    huge = tmp_path / "huge.py"
    body = "x = 1\n" * 100_000
    huge.write_text(HEADER + body + "def f(rank):\n    if rank == 0:\n        dist.barrier()\n")
    quiet = tmp_path / "quiet.py"
    quiet.write_text("x = 1\n" * 100_000)  # names no collective: the prefilter skips it

    start = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "collcheck",
            "check",
            "--no-cache",
            "--format",
            "json",
            "-j",
            "1",
            str(huge),
            str(quiet),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - start

    assert completed.returncode == 1, completed.stderr
    data = json.loads(completed.stdout)
    assert data["errors"] == []
    assert findings(data) == [("huge.py", "CC001", 100_004)]
    assert elapsed < 120, f"took {elapsed:.1f}s"


def test_file_over_the_size_limit_is_reported_not_parsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bug = with_bug(tmp_path)
    big = tmp_path / "big.py"
    big.write_text(HEADER + ("# padding " + "x" * 90 + "\n") * 90_000)  # about 9 MB

    code, data = check_json(capsys, str(big), str(bug))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert list(errors(data)) == ["big.py"]


# --- deep nesting: reported as an error or analysed, never a RecursionError -----------------------


def _nested_ifs(depth: int) -> str:
    text = HEADER + "def f(rank):\n"
    for level in range(depth):
        text += "    " * (level + 1) + f"if rank > {level}:\n"
    return text + "    " * (depth + 1) + "dist.barrier()\n"


def _elif_chain(length: int) -> str:
    text = HEADER + "def f(rank):\n    if rank == 0:\n        pass\n"
    for value in range(1, length):
        text += f"    elif rank == {value}:\n        pass\n"
    return text + "    else:\n        dist.barrier()\n"


# name -> (source, the findings expected if the file is analysed rather than reported)
DEEP: dict[str, tuple[str, list[tuple[str, int]]]] = {
    "parens_1000": (HEADER + "x = " + "(" * 1000 + "1" + ")" * 1000 + "\ndist.all_reduce(x)\n", []),
    "ifs_200": (_nested_ifs(200), [("CC001", 203)]),
    "binop_5000": (
        HEADER
        + "def f(rank):\n    x = "
        + " + ".join(["rank"] * 5000)
        + "\n    if x == 0:\n        dist.barrier()\n",
        [("CC001", 5)],
    ),
    "elif_1500": (_elif_chain(1500), [("CC001", 2 + 2 * 1500 + 1)]),
    "lambdas_1000": (
        HEADER
        + "def f(rank):\n    g = "
        + "lambda: " * 1000
        + "rank\n    if rank == 0:\n        dist.barrier()\n",
        [("CC001", 5)],
    ),
    "calls_3000": (
        HEADER
        + "def f(rank, a):\n    x = a"
        + ".m()" * 3000
        + "\n    if rank == 0:\n        dist.barrier()\n",
        [("CC001", 5)],
    ),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_nesting_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    bug = with_bug(tmp_path)
    source, expected = DEEP[name]
    deep = tmp_path / f"{name}.py"
    deep.write_text(source)

    code, data = check_json(capsys, "-j", "1", str(deep), str(bug))  # in this process: nothing may escape

    assert code == 1
    reported = errors(data)
    if deep.name in reported:
        assert findings(data) == [BUG_FINDING]
    else:
        own = [(c, line) for (file, c, line) in findings(data) if file == deep.name]
        assert own == expected
        assert BUG_FINDING in findings(data)


def test_nesting_within_the_limits_is_analysed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "ifs_90.py"
    deep.write_text(_nested_ifs(90))

    code, data = check_json(capsys, str(deep))

    assert data["errors"] == []
    assert findings(data) == [("ifs_90.py", "CC001", 93)]
    assert code == 1


def test_deep_helper_module_does_not_spoil_its_importer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    helpers = HEADER + "rank = 0\nif rank == 0:\n    y = 0\n"
    helpers += "".join(f"elif rank == {value}:\n    y = {value}\n" for value in range(1, 1500))
    helpers += "\n\ndef sync():\n    dist.barrier()\n"
    (tmp_path / "helpers.py").write_text(helpers)
    (tmp_path / "train.py").write_text(
        HEADER + "from helpers import sync\n\n\ndef f():\n    if dist.get_rank() == 0:\n        sync()\n"
    )

    _, data = check_json(capsys, "-j", "1", str(tmp_path))

    assert "train.py" not in errors(data)
    assert ("train.py", "CC001", 7) in findings(data)


# --- symlinks ------------------------------------------------------------------------------------


def test_folder_symlink_loops_terminate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bug = with_bug(tmp_path / "pkg")
    (tmp_path / "pkg" / "up").symlink_to("..")
    (tmp_path / "pkg" / "here").symlink_to(".")
    (tmp_path / "pkg" / "sub").mkdir()
    (tmp_path / "pkg" / "sub" / "back").symlink_to("../../pkg")

    code, data = check_json(capsys, str(tmp_path))

    assert code == 1
    assert data["errors"] == []
    assert [(f["path"], f["code"], f["line"]) for f in data["findings"]] == [(str(bug), "CC001", 11)]


def test_dangling_symlink_in_a_folder_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_bug(tmp_path)
    (tmp_path / "dangling.py").symlink_to(tmp_path / "gone.py")

    code, data = check_json(capsys, str(tmp_path))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert list(errors(data)) == ["dangling.py"]


def test_dangling_symlink_argument_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dangling = tmp_path / "dangling.py"
    dangling.symlink_to(tmp_path / "gone.py")

    code, data = check_json(capsys, str(dangling))

    assert code == 1
    assert len(data["errors"]) == 1
    assert data["summary"]["files"] == 1


def test_py_symlink_loop_in_a_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_bug(tmp_path)
    (tmp_path / "loop.py").symlink_to("loop.py")

    code, data = check_json(capsys, str(tmp_path))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert list(errors(data)) == ["loop.py"]


def test_non_python_symlink_loop_in_a_folder_is_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_bug(tmp_path)
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")

    code, data = check_json(capsys, str(tmp_path))

    assert code == 1
    assert findings(data) == [BUG_FINDING]
    assert data["errors"] == []


def test_symlink_loop_argument_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = tmp_path / "loop.py"
    loop.symlink_to("loop.py")

    code, data = check_json(capsys, str(loop))

    assert code == 1
    assert list(errors(data)) == ["loop.py"]


# --- many bad files at once, serial and in worker processes ---------------------------------------


def _bad_folder(folder: Path) -> None:
    with_bug(folder)
    shutil.copy(FIXTURES / "CC001" / "odd_even_bug.py", folder / "odd_even_bug.py")
    shutil.copy(FIXTURES / "CC001" / "odd_even_fixed.py", folder / "odd_even_fixed.py")
    for name, content in BAD_INPUTS.items():
        (folder / name).write_bytes(content)
    (folder / "empty.py").write_bytes(b"")
    (folder / "parens_1000.py").write_text(DEEP["parens_1000"][0])
    (folder / "elif_1500.py").write_text(DEEP["elif_1500"][0])
    (folder / "dangling.py").symlink_to(folder / "gone.py")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_folder_of_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: str) -> None:
    _bad_folder(tmp_path)

    code, data = check_json(capsys, "-j", jobs, str(tmp_path))

    assert code == 1
    assert ("bug.py", "CC001", 11) in findings(data)
    assert ("odd_even_bug.py", "CC001", 9) in findings(data)
    assert not [f for f in findings(data) if f[0] in ("odd_even_fixed.py", "empty.py")]
    reported = errors(data)
    assert {*BAD_INPUTS, "parens_1000.py", "dangling.py"} <= set(reported)
    assert set(reported) <= {*BAD_INPUTS, "parens_1000.py", "dangling.py", "elif_1500.py"}
    assert data["summary"]["files"] == 11


def test_a_folder_of_bad_files_serial_and_parallel_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _bad_folder(tmp_path)

    _, serial = check_json(capsys, "-j", "1", str(tmp_path))
    _, parallel = check_json(capsys, "-j", "2", str(tmp_path))

    assert serial == parallel


# --- the solver ----------------------------------------------------------------------------------

# Nonlinear integer arithmetic on the rank: z3's nlsat engine, where a cancelled query may not stop.
NONLINEAR = (
    HEADER
    + """

def f(t):
    rank = dist.get_rank()
    world = dist.get_world_size()
    if (rank * rank * rank + 7 * rank * world) % 1000003 == 12345:
        dist.barrier()
"""
)


def test_z3_rlimit_of_1_unit_on_the_fixtures_finishes_fast(tmp_path: Path) -> None:
    start = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "collcheck",
            "check",
            "--no-cache",
            "--format",
            "json",
            "-j",
            "1",
            "--z3-rlimit",
            "1",
            str(FIXTURES / "CC001"),
            str(FIXTURES / "CC002"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - start

    assert completed.returncode == 1, completed.stderr  # CC007 needs no solver: still found
    data = json.loads(completed.stdout)
    assert data["errors"] == []
    assert {f["code"] for f in data["findings"]} == {"CC007"}
    # Every query gives up at once; each function whose query did is a note that names it.
    assert data["budget_cuts"] and {cut["budget"] for cut in data["budget_cuts"]} == {"z3-rlimit"}
    assert elapsed < 60, f"took {elapsed:.1f}s"


def test_nonlinear_query_never_stalls_the_run(tmp_path: Path) -> None:
    source = tmp_path / "cube.py"
    source.write_text(NONLINEAR)
    command = [
        sys.executable,
        "-m",
        "collcheck",
        "check",
        "--no-cache",
        "--format",
        "concise",
        "-j",
        "1",
        "--z3-rlimit",
        "1",
        str(source),
    ]
    runs = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
        for _ in range(10)
    ]
    deadline = time.monotonic() + 15
    stalled = 0
    for run in runs:
        try:
            run.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
            stalled += 1
    for run in runs:
        assert run.stderr is not None
        run.stderr.close()

    assert stalled == 0, f"{stalled} of 10 runs still busy after 15 s with a solver limit of 1 resource unit"


def test_unknown_while_minimising_the_model_does_not_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    real_check, real_model = z3.Solver.check, z3.Solver.model
    state = {"calls": 0, "last": None}

    def check(self: Any, *args: Any) -> Any:
        state["calls"] += 1
        # the query itself is answered; every later check (the model minimisation) times out
        verdict = real_check(self, *args) if state["calls"] == 1 else z3.unknown
        state["last"] = verdict
        return verdict

    def model(self: Any) -> Any:
        if state["last"] != z3.sat:
            raise z3.Z3Exception("model is not available")
        return real_model(self)

    monkeypatch.setattr(z3.Solver, "check", check)
    monkeypatch.setattr(z3.Solver, "model", model)

    result = check_paths([BUG], Settings(cache=False, jobs=1))

    assert result.errors == []
    # The query was answered, so the gap is named: no counterexample, and a note that says why.
    assert result.findings == []
    assert any("gave up while building a counterexample" in note for note in result.notes), result.notes


@pytest.mark.parametrize("fixture", sorted((FIXTURES / "CC002").glob("*_bug.py")), ids=lambda p: p.name)
def test_a_query_out_of_units_is_a_note_not_a_silent_pass(fixture: Path) -> None:
    """With 1 resource unit a query, each bug is either still found or the give-up is a note."""
    result = check_paths([fixture], Settings(z3_rlimit=1, cache=False, jobs=1))

    assert result.errors == []
    found = [f.code for f in result.findings] == ["CC002"]
    assert found or any("solver gave up" in note for note in result.notes), result.notes


# --- determinism ---------------------------------------------------------------------------------


def _twenty_files(folder: Path) -> None:
    folder.mkdir()
    for source in sorted((FIXTURES / "CC002").glob("*.py"))[:12]:
        shutil.copy(source, folder / source.name)
    for source in sorted((FIXTURES / "CC003").glob("*_bug.py"))[:6]:
        shutil.copy(source, folder / source.name)
    for name in ("barrier_rank0_bug.py", "odd_even_bug.py"):
        shutil.copy(FIXTURES / "CC001" / name, folder / name)
    assert len(list(folder.glob("*.py"))) == 20


def fresh_process_json(*argv: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A run in a new interpreter, so that no solver state is inherited from earlier tests (`env`:
    added to this process's environment)."""
    completed = subprocess.run(
        [sys.executable, "-m", "collcheck", "check", "--no-cache", "--format", "json", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert completed.returncode in (0, 1), completed.stderr
    return json.loads(completed.stdout)


def test_json_is_identical_with_one_and_two_jobs(tmp_path: Path) -> None:
    _twenty_files(tmp_path / "src")

    serial = fresh_process_json("-j", "1", str(tmp_path / "src"))
    parallel = fresh_process_json("-j", "2", str(tmp_path / "src"))

    assert serial["summary"]["files"] == 20
    assert json.dumps(serial, indent=2) == json.dumps(parallel, indent=2)


def test_findings_are_identical_with_one_and_two_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What is found, and where, does not depend on the schedule (only counterexample values do)."""
    _twenty_files(tmp_path / "src")

    _, serial = check_json(capsys, "-j", "1", str(tmp_path / "src"))
    _, parallel = check_json(capsys, "-j", "2", str(tmp_path / "src"))

    def located(data: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(f["path"], f["code"], f["line"], f["column"], f["function"]) for f in data["findings"]]

    assert located(serial) == located(parallel)
    assert serial["errors"] == parallel["errors"] == []
    assert serial["summary"] == parallel["summary"]


def test_json_does_not_depend_on_the_hash_seed() -> None:
    """Counterexamples are z3 models, and z3 picks them by the order of its facts: nothing that
    reaches the solver may come in set order (a membership fixture's model once flipped with
    PYTHONHASHSEED)."""
    outputs = [
        fresh_process_json("-j", "1", str(FIXTURES / "groups"), env={"PYTHONHASHSEED": seed})
        for seed in ("0", "1", "2")
    ]
    assert outputs[0]["findings"]
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]


def test_a_files_result_does_not_depend_on_the_files_before_it() -> None:
    target = FIXTURES / "CC002" / "nested_loop_bug.py"
    before = FIXTURES / "CC002" / "strided_shards_bug.py"

    alone = fresh_process_json("-j", "1", str(target))["findings"]
    after = [
        f
        for f in fresh_process_json("-j", "1", str(before), str(target))["findings"]
        if Path(f["path"]).resolve() == target.resolve()
    ]

    assert alone and alone == after


def test_python_dash_m_version() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "collcheck", "--version"], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0
    assert completed.stdout.strip() == f"collcheck {__version__}"
