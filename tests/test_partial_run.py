"""A run over some files of a project (pre-commit's staged files) follows helpers and rank
constants into the files around them, and reports for the given files what a whole-tree run does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from collcheck import api
from collcheck.api import check_paths, project_root
from collcheck.cli import light_check
from collcheck.config import load_settings

ENV = "import os\nRANK = int(os.environ['RANK'])\nIS_MAIN = RANK == 0\n"
COMM = "import torch.distributed as dist\ndef sync(t):\n    dist.all_reduce(t)\n"
TRAIN = (
    "import torch.distributed as dist\n"
    "from .env import RANK, IS_MAIN\n"
    "from . import env\n"
    "from .comm import sync\n"
    "def a(t):\n"
    "    if RANK == 0:\n"
    "        dist.barrier()\n"
    "def b(t):\n"
    "    if IS_MAIN:\n"
    "        dist.all_reduce(t)\n"
    "def c(t):\n"
    "    if env.RANK == 0:\n"
    "        sync(t)\n"
    "def quiet(t):\n"
    "    sync(t)\n"
    "    if env.RANK == 0:\n"
    "        print(t)\n"
)


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n", encoding="utf-8")
    package = tmp_path / "pkg"
    package.mkdir()
    for name, text in {"__init__.py": "", "env.py": ENV, "comm.py": COMM, "train.py": TRAIN}.items():
        (package / name).write_text(text, encoding="utf-8")
    return package / "train.py"


def _found(paths: list[Path], root: Path, **overrides: object) -> set[tuple[str, int, str]]:
    settings = load_settings(paths).with_overrides(jobs=1, cache=False, **overrides)
    result = check_paths(paths, settings)
    assert not result.errors
    return {(Path(f.location.path).name, f.location.line, f.code) for f in result.findings}


def test_project_root_is_the_nearest_pyproject(tmp_path: Path) -> None:
    train = _project(tmp_path)
    assert project_root([train]) == tmp_path
    assert project_root([tmp_path / "pkg"]) == tmp_path


def test_one_file_reports_what_the_whole_tree_reports(tmp_path: Path) -> None:
    train = _project(tmp_path)
    whole = {f for f in _found([tmp_path], tmp_path) if f[0] == "train.py"}
    assert whole == {("train.py", 7, "CC001"), ("train.py", 10, "CC001"), ("train.py", 13, "CC001")}
    assert _found([train], tmp_path) == whole


def test_a_partial_run_indexes_only_the_files_its_files_reach(tmp_path: Path, facts_reads: list[str]) -> None:
    """train.py reaches env.py, comm.py and (through `from . import env`) nothing else: a file of
    the project that no import of theirs names, at any depth, is never read for the index, and
    a file reached two imports away is."""
    train = _project(tmp_path)
    package = tmp_path / "pkg"
    (package / "comm.py").write_text("from .deep import send\ndef sync(t):\n    send(t)\n", encoding="utf-8")
    (package / "deep.py").write_text(COMM.replace("sync", "send"), encoding="utf-8")
    (package / "unrelated.py").write_text(COMM + "def other(t):\n    sync(t)\n", encoding="utf-8")
    found = _found([train], tmp_path)
    assert ("train.py", 13, "CC001") in found  # sync() of deep.py, two files away, is followed
    assert "unrelated.py" not in facts_reads
    assert {"train.py", "env.py", "comm.py", "deep.py"} <= set(facts_reads)


def test_without_project_context_only_the_given_file_is_read(tmp_path: Path) -> None:
    train = _project(tmp_path)
    assert _found([train], tmp_path, project_context=False) == set()


def test_an_edited_constant_file_rechecks_the_file_on_a_warm_cache(tmp_path: Path) -> None:
    train = _project(tmp_path)
    settings = load_settings([train]).with_overrides(jobs=1, cache_dir=str(tmp_path / ".cache"))
    first = check_paths([train], settings)
    assert len(first.findings) == 3
    (tmp_path / "pkg" / "comm.py").write_text("def sync(t):\n    return t\n", encoding="utf-8")
    second = check_paths([train], settings)
    assert {f.location.line for f in second.findings} == {7, 10}


def test_an_edited_rank_constant_rechecks_its_importers_on_a_warm_cache(tmp_path: Path) -> None:
    """train.py's findings come from constants of env.py (no call reaches env.py): an edit of
    env.py must still re-check train.py, both ways."""
    train = _project(tmp_path)
    env = tmp_path / "pkg" / "env.py"
    settings = load_settings([train]).with_overrides(jobs=1, cache_dir=str(tmp_path / ".cache"))
    assert {f.location.line for f in check_paths([train], settings).findings} == {7, 10, 13}
    env.write_text("RANK = 0\nIS_MAIN = True\n", encoding="utf-8")
    assert {f.location.line for f in check_paths([train], settings).findings} == set()
    env.write_text(ENV, encoding="utf-8")
    assert {f.location.line for f in check_paths([train], settings).findings} == {7, 10, 13}


@pytest.mark.parametrize(
    ("env", "env_edited"),
    [
        (  # bound inside `try:`, out of the index's column-0 pattern
            "import os\ntry:\n    RANK = int(os.environ['RANK'])\nexcept KeyError:\n    RANK = 0\n",
            "try:\n    RANK = 0\nexcept KeyError:\n    RANK = 0\n",
        ),
        ("import os\nRANK, WORLD = int(os.environ['RANK']), 8\n", "RANK, WORLD = 0, 8\n"),  # a tuple target
    ],
    ids=["try-block", "tuple-target"],
)
def test_an_edited_value_bound_out_of_column_zero_rechecks_its_importers(
    tmp_path: Path, env: str, env_edited: str
) -> None:
    train = _project(tmp_path)
    package = tmp_path / "pkg"
    (package / "env.py").write_text(env, encoding="utf-8")
    guarded = "def a(t):\n    if RANK == 0:\n        dist.barrier()\n"
    train.write_text(f"import torch.distributed as dist\nfrom .env import RANK\n{guarded}", encoding="utf-8")
    settings = load_settings([train]).with_overrides(jobs=1, cache_dir=str(tmp_path / ".cache"))
    assert {f.location.line for f in check_paths([train], settings).findings} == {5}
    (package / "env.py").write_text(env_edited, encoding="utf-8")
    assert {f.location.line for f in check_paths([train], settings).findings} == set()


def _age(root: Path, seconds: float = 60.0) -> None:
    """Folders walked more than the racy window ago (a fresh tmp_path is never cached)."""
    past = time.time() - seconds
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (past, past))


def test_an_unchanged_project_is_not_walked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path)
    settings = load_settings([tmp_path]).with_overrides(jobs=1, cache_dir="cache")
    (tmp_path / "cache").mkdir()  # not a default exclusion: the walk enters it, but never stamps it
    _age(tmp_path)
    first = api._project_files(tmp_path, settings)
    assert {Path(path).name for path in first} == {"__init__.py", "env.py", "comm.py", "train.py"}

    def no_walk(*args: object, **kwargs: object) -> list[Path]:
        raise AssertionError("walked again")

    monkeypatch.setattr(api, "collect_files", no_walk)
    assert api._project_files(tmp_path, settings) == first


def test_a_file_added_after_a_cached_walk_is_indexed(tmp_path: Path) -> None:
    """A new helper file moves its folder's modification time: the walk is done again and a
    call into it is followed."""
    train = _project(tmp_path)
    settings = load_settings([train]).with_overrides(jobs=1, cache_dir=str(tmp_path / ".cache"))
    _age(tmp_path)
    assert {f.location.line for f in check_paths([train], settings).findings} == {7, 10, 13}
    package = tmp_path / "pkg"
    (package / "train.py").write_text(
        TRAIN.replace("from .comm import sync", "from .comm import sync\nfrom .extra import more")
        + "def d(t):\n    if env.RANK == 0:\n        more(t)\n",
        encoding="utf-8",
    )
    (package / "extra.py").write_text(COMM.replace("def sync", "def more"), encoding="utf-8")
    lines = {f.location.line for f in check_paths([train], settings).findings}
    assert lines == {8, 11, 14, 21}


def test_a_plain_check_on_a_warm_cache_loads_neither_typer_nor_the_engine(tmp_path: Path) -> None:
    train = _project(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'demo'\n[tool.collcheck]\ncache-dir = '.cache'\n", encoding="utf-8"
    )
    script = (
        "import sys\nfrom collcheck.cli import main\ncode = main(['check', sys.argv[1]])\n"
        "heavy = ('typer', 'pydantic', 'z3', 'libcst', 'collcheck.static.engine', 'tomllib')\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for target, expected in ((train, "1"), (tmp_path / "pkg" / "comm.py", "0")):
        runs = [
            subprocess.run(
                [sys.executable, "-c", script, str(target)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            for _ in range(2)
        ]
        code, _, loaded = runs[1].stdout.strip().splitlines()[-1].partition(" ")
        assert code == expected, runs[1].stderr
        assert "collcheck.static.engine" in runs[0].stdout  # the cold run analysed the file
        # tomllib stays: it reads pyproject.toml; the catalogs are not parsed (their modules are)
        assert loaded == "['tomllib', 'tomllib._parser', 'tomllib._re', 'tomllib._types']"


def test_plain_check_paths() -> None:
    """A check with no option: its paths and no option fields (`--` ends the options)."""
    assert light_check(["check", "a.py", "b.py"]) == ([Path("a.py"), Path("b.py")], {})
    assert light_check(["check", "--", "-odd.py"]) == ([Path("-odd.py")], {})
    assert light_check(["check", "-v", "a.py"]) == ([Path("a.py")], {"verbose": True})
    assert light_check(["check"]) is None
    assert light_check(["rules"]) is None


def test_light_check_reads_the_common_options_and_leaves_the_rest_to_typer() -> None:
    assert light_check(["check", "--format", "json", "-o", "r.json", "-j", "2", "src"]) == (
        [Path("src")],
        {"output_format": "json", "output": Path("r.json"), "jobs": 2},
    )
    assert light_check(["check", "--format=sarif", "--no-cache", "-v", "a.py", "--", "-b.py"]) == (
        [Path("a.py"), Path("-b.py")],
        {"output_format": "sarif", "no_cache": True, "verbose": True},
    )
    for typer_only in (
        ["check", "--fix", "a.py"],  # fixes, baselines, timeouts: typer
        ["check", "-j2", "a.py"],  # the compact form
        ["check", "-j", "0", "a.py"],  # a value typer refuses, with its own message
        ["check", "--format", "json"],  # no path: "." with the parser's defaults
        ["check", "a.py", "--format"],  # a missing value
        ["check", "--no-cache=1", "a.py"],
        ["check", "--help"],
    ):
        assert light_check(typer_only) is None, typer_only


@pytest.mark.parametrize(
    "options",
    [
        ["--format", "json"],
        ["--format=concise", "--statistics"],
        ["--select", "CC001,CC003", "--exit-zero"],
        ["--ignore", "CC007", "--format", "github"],
        ["--format", "nonsense"],
        ["--select", "XX9"],
    ],
)
def test_the_light_path_answers_as_typer_does(
    options: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from collcheck import cli

    target = str(Path(__file__).resolve().parents[1] / "fixtures" / "CC001")
    argv = ["check", "--no-cache", "-j", "1", *options, target]
    light = cli.main(argv)
    light_out = capsys.readouterr()
    monkeypatch.setattr(cli, "light_check", lambda args: None)
    typed = cli.main(argv)
    typed_out = capsys.readouterr()
    assert (light, light_out.out, light_out.err) == (typed, typed_out.out, typed_out.err)


def test_common_options_do_not_load_typer() -> None:
    target = Path(__file__).resolve().parents[1] / "fixtures" / "CC001" / "barrier_rank0_bug.py"
    script = (
        "import sys\nfrom collcheck.cli import main\n"
        "argv = ['check', '--format', 'json', '-o', sys.argv[2], '-j', '1', '--no-cache', sys.argv[1]]\n"
        "code = main(argv)\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'pydantic')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "r.json"
        done = subprocess.run(
            [sys.executable, "-c", script, str(target), str(report)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.stdout.strip().splitlines()[-1] == "1 []", done.stderr
        assert json.loads(report.read_text(encoding="utf-8"))["findings"]


def test_a_catalog_broken_after_a_warm_run_is_still_an_error(tmp_path: Path) -> None:
    """A warm run answered by the manifest parses no catalog; a catalog edited since has another
    fingerprint, so nothing is answered and the parse reports it (exit 2)."""
    train = _project(tmp_path)
    catalog = tmp_path / "extra.toml"
    catalog.write_text('[catalog]\nname = "extra"\n', encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'demo'\n[tool.collcheck]\ncache-dir = '.cache'\ncatalogs = ['extra.toml']\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def run() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "collcheck", "check", str(train)]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    assert run().returncode == 1
    assert run().returncode == 1  # warm
    catalog.write_text("[catalog\n", encoding="utf-8")
    broken = run()
    assert broken.returncode == 2
    assert "not valid TOML" in broken.stderr
