"""`[tool.collcheck]`: found upward from the paths, its keys applied, bad tables rejected with exit 2
and a message naming the key, and the command line overriding it."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import cli_support
import pytest
from cli_support import BUG, LOOP_BUG, RANK2, located, run

from collcheck.config import ConfigError, Settings, find_pyproject, load_settings

run_json = functools.partial(cli_support.run_json, command=("check",))


def write_config(folder: Path, table: str, project: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    head = '[project]\nname = "demo"\n\n' if project else ""
    path.write_text(head + "[tool.collcheck]\n" + table)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """proj/{src/a.py (CC001:11), src/loop.py (CC002:9), tests/test_a.py, legacy/old.py,
    src/generated_x.py, build/b.py}: every file holds a finding."""
    root = tmp_path / "proj"
    for relative in ("src/a.py", "tests/test_a.py", "legacy/old.py", "src/generated_x.py", "build/b.py"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUG, root / relative)
    shutil.copy(LOOP_BUG, root / "src" / "loop.py")
    return root


ALL = [
    ("old.py", "CC001", 11),
    ("a.py", "CC001", 11),
    ("generated_x.py", "CC001", 11),
    ("loop.py", "CC002", 9),
    ("test_a.py", "CC001", 11),
]


def test_without_config_every_default_rule_runs(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, data = run_json(capsys, str(project))

    assert code == 1
    assert located(data) == ALL  # build/ is excluded by default


# --- discovery -----------------------------------------------------------------------------------


def test_config_is_found_upward_from_a_file(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'select = ["CC002"]\n')

    code, data = run_json(capsys, str(project / "src" / "a.py"), str(project / "src" / "loop.py"))

    assert located(data) == [("loop.py", "CC002", 9)]
    assert code == 1


def test_config_is_found_upward_from_a_folder(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'ignore = ["CC001"]\n')

    code, data = run_json(capsys, str(project / "src"))

    assert located(data) == [("loop.py", "CC002", 9)]
    assert code == 1


def test_pyproject_without_the_table_is_skipped(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'ignore = ["CC001"]\n')
    (project / "src" / "pyproject.toml").write_text('[project]\nname = "inner"\n[tool.other]\nx = 1\n')

    assert find_pyproject([project / "src" / "a.py"]) == (project / "pyproject.toml").resolve()
    code, data = run_json(capsys, str(project / "src" / "a.py"))
    assert (code, data["findings"]) == (0, [])


def test_nearest_table_wins(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'ignore = ["CC001"]\n')
    write_config(project / "src", 'ignore = ["CC002"]\n')

    code, data = run_json(capsys, str(project / "src"))

    assert located(data) == [("a.py", "CC001", 11), ("generated_x.py", "CC001", 11)]
    assert code == 1


def test_explicit_config_file(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path) -> None:
    elsewhere = write_config(tmp_path / "elsewhere", 'select = ["CC002"]\n')

    code, data = run_json(capsys, "--config", str(elsewhere), str(project / "src"))

    assert located(data) == [("loop.py", "CC002", 9)]
    assert code == 1


def test_missing_explicit_config_file_exits_2(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    missing = project / "nope.toml"

    code, out, err = run(capsys, "check", "--no-cache", "--config", str(missing), str(project))

    assert code == 2
    assert out == ""
    assert str(missing) in err


# --- keys ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('select = ["CC001"]\n', [f for f in ALL if f[1] == "CC001"]),
        ('select = "CC002"\n', [("loop.py", "CC002", 9)]),  # one string is a list of one
        ('select = ["cc0"]\nignore = ["CC001"]\n', [("loop.py", "CC002", 9)]),
        ('ignore = ["CC0"]\n', []),
        ('select = ["CC1"]\n', []),
    ],
)
def test_select_and_ignore(
    capsys: pytest.CaptureFixture[str], project: Path, table: str, expected: list[Any]
) -> None:
    write_config(project, table)

    code, data = run_json(capsys, str(project))

    assert located(data) == expected
    assert code == (1 if expected else 0)


def test_per_file_ignores_by_file_name(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'per-file-ignores = { "test_*.py" = ["CC001"], "loop.py" = "CC0" }\n')

    _, data = run_json(capsys, str(project))

    assert located(data) == [("old.py", "CC001", 11), ("a.py", "CC001", 11), ("generated_x.py", "CC001", 11)]


def test_per_file_ignores_by_path_from_the_project_root(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(project, 'per-file-ignores = { "tests/*" = ["CC001"], "src/loop.py" = ["CC002"] }\n')
    monkeypatch.chdir(project)

    _, data = run_json(capsys, ".")

    assert located(data) == [("old.py", "CC001", 11), ("a.py", "CC001", 11), ("generated_x.py", "CC001", 11)]


def test_per_file_ignores_do_not_depend_on_the_working_folder(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'per-file-ignores = { "tests/*" = ["CC001"] }\n')

    _, data = run_json(capsys, str(project))  # absolute path: "/…/proj/tests/test_a.py"

    assert ("test_a.py", "CC001", 11) not in located(data)


def test_extend_exclude_by_name(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'extend-exclude = ["generated_*", "legacy"]\n')

    _, data = run_json(capsys, str(project))

    assert located(data) == [("a.py", "CC001", 11), ("loop.py", "CC002", 9), ("test_a.py", "CC001", 11)]


def test_extend_exclude_by_path_from_the_project_root(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(project, 'extend-exclude = ["legacy/*", "src/generated_*"]\n')
    monkeypatch.chdir(project)

    _, data = run_json(capsys, ".")

    assert located(data) == [("a.py", "CC001", 11), ("loop.py", "CC002", 9), ("test_a.py", "CC001", 11)]


def test_extend_exclude_does_not_depend_on_the_working_folder(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'extend-exclude = ["legacy/*"]\n')

    _, data = run_json(capsys, str(project))

    assert ("old.py", "CC001", 11) not in located(data)


def test_exclude_replaces_the_defaults(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    write_config(project, 'exclude = ["legacy", "tests"]\n')

    _, data = run_json(capsys, str(project))

    # build/ is walked now that the default list is replaced
    assert located(data) == [
        ("b.py", "CC001", 11),
        ("a.py", "CC001", 11),
        ("generated_x.py", "CC001", 11),
        ("loop.py", "CC002", 9),
    ]


def test_excluded_file_named_explicitly_is_still_checked(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'extend-exclude = ["generated_*"]\n')

    _, data = run_json(capsys, str(project / "src" / "generated_x.py"))

    assert located(data) == [("generated_x.py", "CC001", 11)]


def test_world_size(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_config(tmp_path, "world-size = 2\n")
    (tmp_path / "rank2.py").write_text(RANK2)

    code, data = run_json(capsys, str(tmp_path / "rank2.py"))

    assert (code, data["findings"]) == (0, [])


def test_keys_with_underscores(tmp_path: Path) -> None:
    write_config(tmp_path, 'world_size = 4\nextend_exclude = ["gen"]\nz3_rlimit = 50\n')

    settings = load_settings([tmp_path])

    assert (settings.world_size, settings.extend_exclude, settings.z3_rlimit) == (4, ("gen",), 50)


def test_settings_from_a_full_table(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        'select = ["CC0"]\nignore = ["cc102"]\nextend-select = ["CC102"]\nworld-size = 8\n'
        'per-file-ignores = { "tests/*" = ["CC003"] }\nexclude = ["a"]\nextend-exclude = ["generated_*"]\n'
        "jobs = 2\ncache = false\nrespect-gitignore = false\nmax-paths = 64\nmax-inline-depth = 2\n",
    )

    settings = load_settings([tmp_path / "x.py"])

    assert settings == Settings(
        select=("CC0",),
        ignore=("CC102",),
        extend_select=("CC102",),
        world_size=8,
        per_file_ignores=(("tests/*", ("CC003",)),),
        exclude=("a",),
        extend_exclude=("generated_*",),
        jobs=2,
        cache=False,
        respect_gitignore=False,
        max_paths=64,
        max_inline_depth=2,
        root=str(tmp_path),
    )


# --- bad tables: exit 2, the key named, no report ------------------------------------------------


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ("bogus-key = 1\n", "bogus-key"),
        ("selct = ['CC001']\n", "selct"),
        ('world-size = "8"\n', "world-size"),
        ("world-size = true\n", "world-size"),
        ("world-size = 1\n", "world-size"),
        ("z3-rlimit = -5\n", "z3-rlimit"),
        ("z3-timeout = 50\n", "z3-timeout"),
        ("select = [1]\n", "select"),
        ("ignore = 3\n", "ignore"),
        ('per-file-ignores = ["tests/*"]\n', "per-file-ignores"),
        ('per-file-ignores = { "tests/*" = 3 }\n', "per-file-ignores.tests/*"),
        ('cache = "no"\n', "cache"),
        ("memory = 1\n", "memory"),
    ],
)
def test_bad_key_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], project: Path, table: str, named: str
) -> None:
    write_config(project, table)
    report = project / "report.json"

    code, out, err = run(capsys, "check", "--no-cache", "-o", str(report), str(project))

    assert code == 2
    assert f"'{named}'" in err
    assert out == ""
    assert not report.exists()


def test_invalid_toml_exits_2_naming_the_file(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    config = write_config(project, 'select = "CC001\n')

    code, out, err = run(capsys, "check", "--no-cache", str(project))

    assert code == 2
    assert str(config) in err
    assert out == ""


def test_tool_collcheck_not_a_table_exits_2(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool]\ncollcheck = "on"  # [tool.collcheck\n')

    code, _, err = run(capsys, "check", "--no-cache", str(project))

    assert code == 2
    assert "[tool.collcheck]" in err


def test_load_settings_raises_config_error(tmp_path: Path) -> None:
    write_config(tmp_path, "unknown = 1\n")

    with pytest.raises(ConfigError, match="'unknown'"):
        load_settings([tmp_path])


def test_select_of_an_unknown_code_in_config_exits_2(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'select = ["CC999"]\n')

    code, _, err = run(capsys, "check", "--no-cache", str(project))

    assert code == 2
    assert "CC999" in err


# --- the command line overrides the configuration -------------------------------------------------


def test_command_line_select_overrides_config_select(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'select = ["CC002"]\n')

    _, data = run_json(capsys, "--select", "CC001", str(project / "src"))

    assert located(data) == [("a.py", "CC001", 11), ("generated_x.py", "CC001", 11)]


def test_command_line_ignore_replaces_config_ignore(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'ignore = ["CC001"]\n')

    _, data = run_json(capsys, "--ignore", "CC002", str(project / "src"))

    assert located(data) == [("a.py", "CC001", 11), ("generated_x.py", "CC001", 11)]


def test_command_line_world_size_overrides_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_config(tmp_path, "world-size = 2\n")
    (tmp_path / "rank2.py").write_text(RANK2)

    code, data = run_json(capsys, "--world-size", "3", str(tmp_path / "rank2.py"))

    assert code == 1
    assert located(data) == [("rank2.py", "CC001", 6)]
    assert data["findings"][0]["counterexample"]["world_size"] == 3


def test_command_line_exit_zero_and_jobs_with_config(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, "jobs = 1\n")

    code, _, _ = run(capsys, "check", "--no-cache", "--exit-zero", "-j", "2", str(project))

    assert code == 0


def test_command_line_select_overrides_config_ignore(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    write_config(project, 'ignore = ["CC001"]\n')

    _, data = run_json(capsys, "--select", "CC001", str(project / "src"))

    assert located(data) == [("a.py", "CC001", 11), ("generated_x.py", "CC001", 11)]
