"""Installed packages summarised from their source (issue 25): an in-house communication layer
installed only in a separate virtualenv is found through `--python`, `[tool.collcheck] python`,
`$VIRTUAL_ENV` or a `.venv` beside the project, never imported and never run."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.bundled_summaries import bundled_releases
from collcheck.catalog import load_catalog
from collcheck.cli import main
from collcheck.config import ConfigError, Settings, load_settings
from collcheck.environment import EnvironmentSource, environment_at, find_environment
from collcheck.package_summaries import imported_modules, installed_version

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"

INIT = """
from ourlib.comm import Reducer, is_last_rank, sync
from ourlib import comm

raise SystemExit("ourlib was executed")
"""

COMM = """
import torch.distributed as dist

from ._impl import reduce_now

raise SystemExit("ourlib.comm was executed")


def _wait_all(group=None):
    dist.barrier(group=group)


def sync(group=None):
    \"\"\"Every rank waits here.\"\"\"
    if group is not None and not hasattr(group, "size"):
        raise TypeError("not a group")
    _wait_all(group)


def sometimes(flag):
    if flag:
        dist.barrier()


def is_last_rank():
    return dist.get_rank() == dist.get_world_size() - 1


def mean_all(tensor, group=None):
    if not dist.is_initialized() or dist.get_world_size(group) < 2:
        return tensor  # a process alone in its group: no second behaviour
    dist.all_reduce(tensor, group=group)
    return tensor


def not_on_leader(tensor):
    if dist.get_rank() == 0:
        return tensor
    dist.all_reduce(tensor)
    return tensor


_GROUPS = {}


def reduce_in(tensor, name):
    dist.all_reduce(tensor, group=_GROUPS[name])


class Reducer:
    def __init__(self, scale=1.0):
        self.scale = scale

    @property
    def is_leader(self):
        return dist.get_rank() == 0

    def flush(self, tensor):
        self._reduce(tensor)

    def _reduce(self, tensor):
        reduce_now(tensor)
"""

IMPL = """
from torch import distributed as dist


def reduce_now(tensor):
    dist.all_reduce(tensor)
"""

BUG = """
import torch.distributed as dist

import ourlib


def step(tensor):
    if dist.get_rank() == 0:
        ourlib.sync()  # expect: CC001
"""

FIXED = """
import torch.distributed as dist

import ourlib


def step(tensor):
    if dist.get_rank() == 0:
        print("leader")
    ourlib.sync()
"""

METHOD_BUG = """
import torch.distributed as dist

from ourlib.comm import Reducer


def step(tensor):
    reducer = Reducer()
    if dist.get_rank() == 0:
        reducer.flush(tensor)  # expect: CC001
"""

METHOD_FIXED = """
import torch.distributed as dist

from ourlib.comm import Reducer


def step(tensor):
    reducer = Reducer()
    reducer.flush(tensor)
    if dist.get_rank() == 0:
        print(tensor)
"""

PREDICATE_BUG = """
import torch.distributed as dist

from ourlib import is_last_rank


def step(tensor):
    if is_last_rank():
        dist.all_reduce(tensor)  # expect: CC001
"""

PROPERTY_BUG = """
import torch.distributed as dist

from ourlib.comm import Reducer


def step(tensor):
    reducer = Reducer()
    if reducer.is_leader:
        dist.barrier()  # expect: CC001
"""

USER_SUBCLASS_BUG = """
import torch.distributed as dist

from ourlib import Reducer


class Mine(Reducer):
    def step(self, tensor):
        if dist.get_rank() == 0:
            self.flush(tensor)  # expect: CC001
"""

CONDITIONAL = """
import torch.distributed as dist

from ourlib.comm import sometimes


def given(tensor):
    if dist.get_rank() == 0:
        sometimes(True)  # expect: CC001


def withheld(tensor):
    if dist.get_rank() == 0:
        sometimes(False)


def unknown(tensor, flag):
    if dist.get_rank() == 0:
        sometimes(flag)  # expect: CC001
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def make_venv(root: Path, version: str = "1.0") -> Path:
    """A virtualenv with `ourlib` in its site-packages; its bin/python links to nothing."""
    site = root / "lib" / PY / "site-packages"
    _write(
        root / "pyvenv.cfg",
        f"home = /nonexistent\nversion = {sys.version_info.major}.{sys.version_info.minor}.0\n",
    )
    _write(site / "ourlib" / "__init__.py", INIT)
    _write(site / "ourlib" / "comm.py", COMM)
    _write(site / "ourlib" / "_impl.py", IMPL)
    _write(
        site / f"ourlib-{version}.dist-info" / "METADATA",
        f"Metadata-Version: 2.1\nName: ourlib\nVersion: {version}\n",
    )
    (root / "bin").mkdir(parents=True, exist_ok=True)
    os.symlink(root / "nowhere" / "python3", root / "bin" / "python")
    return root / "bin" / "python"


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No active environment, a user cache of the test's own."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return tmp_path


def _codes(path: Path, settings: Settings) -> list[tuple[str, int]]:
    result = check_paths([path], settings)
    assert all(f.error is None for f in result.files), [f.error for f in result.files]
    return [(finding.code, finding.location.line) for f in result.files for finding in f.findings]


def _expected(path: Path) -> list[tuple[str, int]]:
    lines = path.read_text().splitlines()
    return [
        (line.split("# expect: ")[1].strip(), number)
        for number, line in enumerate(lines, 1)
        if "# expect: " in line
    ]


def _settings(tmp: Path, **changes: object) -> Settings:
    return Settings(cache_dir=str(tmp / "project-cache"), **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bug", "fixed"),
    [
        (BUG, FIXED),
        (METHOD_BUG, METHOD_FIXED),
        (PREDICATE_BUG, None),
        (PROPERTY_BUG, None),
        (USER_SUBCLASS_BUG, None),
    ],
)
def test_package_in_a_separate_venv_is_found_through_python(
    isolated: Path, bug: str, fixed: str | None
) -> None:
    python = make_venv(isolated / "env")
    project = isolated / "project"
    bug_file = _write(project / "bug.py", bug)
    settings = _settings(isolated, python=str(python))
    assert _codes(bug_file, settings) == _expected(bug_file)
    if fixed is not None:
        assert _codes(_write(project / "fixed.py", fixed), settings) == []
    assert "ourlib" not in sys.modules and "ourlib.comm" not in sys.modules


@pytest.mark.parametrize("bug", [BUG, METHOD_BUG, PREDICATE_BUG, PROPERTY_BUG, USER_SUBCLASS_BUG])
def test_without_an_environment_the_package_is_unknown(isolated: Path, bug: str) -> None:
    make_venv(isolated / "env")
    bug_file = _write(isolated / "project" / "bug.py", bug)
    assert _codes(bug_file, _settings(isolated)) == []


def test_active_virtual_env_is_used(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_venv(isolated / "env")
    monkeypatch.setenv("VIRTUAL_ENV", str(isolated / "env"))
    bug_file = _write(isolated / "project" / "bug.py", BUG)
    assert _codes(bug_file, _settings(isolated)) == _expected(bug_file)


def test_project_venv_and_configured_python(isolated: Path) -> None:
    project = isolated / "project"
    make_venv(project / ".venv")
    bug_file = _write(project / "bug.py", BUG)
    _write(project / "pyproject.toml", "[tool.collcheck]\ncache = false\n")
    assert _codes(bug_file, load_settings([bug_file])) == _expected(bug_file)
    other = isolated / "other"
    make_venv(other / "env")
    moved = _write(other / "code" / "bug.py", BUG)
    _write(
        other / "code" / "pyproject.toml", '[tool.collcheck]\ncache = false\npython = "../env/bin/python"\n'
    )
    assert _codes(moved, load_settings([moved])) == _expected(moved)


def test_cli_python_option_and_summary_cache(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_venv(isolated / "env")
    bug_file = _write(isolated / "project" / "bug.py", BUG)
    argv = ["check", str(bug_file), "--python", str(python), "--format", "concise"]
    assert main(argv) == 1
    assert "CC001" in capsys.readouterr().out
    stored = list((isolated / "user-cache" / "collcheck" / "summaries" / "ourlib").glob("*.toml"))
    assert len(stored) == 1  # summarised once for version 1.0, sealed in the user's cache
    assert main([*argv, "-v"]) == 1  # answered from that entry
    assert "ourlib.summary.toml" in capsys.readouterr().err
    assert "sync" in stored[0].read_text()
    assert "ourlib" not in sys.modules


def test_a_tampered_summary_entry_is_not_believed(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    bug_file = _write(isolated / "project" / "bug.py", BUG)
    settings = _settings(isolated, python=str(python))
    assert _codes(bug_file, settings) == _expected(bug_file)
    (entry,) = (isolated / "user-cache" / "collcheck" / "summaries" / "ourlib").glob("*.toml")
    sealed = entry.read_bytes()
    entry.write_bytes(sealed.split(b"\n", 1)[0] + b"\n[catalog]\nname = 'forged'\n")
    fresh = Settings(cache_dir=str(isolated / "another-project-cache"), python=str(python))
    assert _codes(bug_file, fresh) == _expected(bug_file)  # the forged entry is a miss, made again
    assert b"forged" not in entry.read_bytes()


def test_helpers_conditional_on_a_parameter_are_decided_by_the_call(isolated: Path) -> None:
    """`sometimes(flag)` communicates when `flag` holds (its summary's `when`): a literal argument
    decides; an unknown one is reported, and the message names the condition."""
    python = make_venv(isolated / "env")
    bug_file = _write(isolated / "project" / "bug.py", CONDITIONAL)
    result = check_paths([bug_file], _settings(isolated, python=str(python)))
    findings = [finding for f in result.files for finding in f.findings]
    assert [(f.code, f.location.line) for f in findings] == _expected(bug_file)
    assert "(a collective when flag)" not in findings[0].message
    assert "(a collective when flag)" in findings[1].message


def test_summarize_writes_a_catalog_that_summaries_can_name(isolated: Path) -> None:
    make_venv(isolated / "env")
    out = isolated / "ourlib.summary.toml"
    site = isolated / "env" / "lib" / PY / "site-packages"
    assert main(["summarize", str(site / "ourlib"), "-o", str(out)]) == 0
    catalog = load_catalog(summaries=[out])
    spec = catalog.functions["ourlib.sync"]
    assert (spec.op, spec.params, spec.group) == ("barrier", ("group",), "group")
    assert catalog.functions["ourlib._impl.reduce_now"].op == "all_reduce"
    assert catalog.functions["ourlib.comm.sometimes"].when == "flag"
    assert "ourlib.comm.reduce_in" not in catalog.functions  # its group depends on an argument
    assert catalog.functions["ourlib.comm.mean_all"].group == "group"
    assert "ourlib.comm.not_on_leader" not in catalog.functions
    assert catalog.rank_functions["ourlib.is_last_rank"] == "(rank == (world - 1))"
    assert catalog.types["ourlib.Reducer"] == "ourlib.comm.Reducer"
    project = isolated / "project"
    bug_file = _write(project / "bug.py", BUG)
    _write(
        project / "pyproject.toml",
        '[tool.collcheck]\ncache = false\nsummaries = ["../ourlib.summary.toml"]\n',
    )
    assert _codes(bug_file, load_settings([bug_file])) == _expected(bug_file)
    json_out = isolated / "ourlib.summary.json"
    assert main(["summarize", str(site / "ourlib"), "-o", str(json_out)]) == 0
    assert '"ourlib.sync"' in json_out.read_text()
    assert "ourlib" not in sys.modules


def test_hand_written_entries_win_over_summaries(isolated: Path) -> None:
    summary = _write(
        isolated / "s.toml", '[[op]]\nop = "all_gather"\nnames = ["torch.distributed.barrier"]\n'
    )
    assert load_catalog(summaries=[summary]).functions["torch.distributed.barrier"].op == "barrier"


# ----------------------------------------------------------------------------- environment discovery


def test_environment_layouts(tmp_path: Path) -> None:
    python = make_venv(tmp_path / "env")
    site = os.path.realpath(tmp_path / "env" / "lib" / PY / "site-packages")
    for named in (str(python), str(tmp_path / "env")):
        found = environment_at(named, EnvironmentSource.NAMED)
        assert found is not None and found.site_packages == (site,)
    windows = tmp_path / "win"
    (windows / "Lib" / "site-packages").mkdir(parents=True)
    (windows / "Scripts").mkdir()
    _write(windows / "pyvenv.cfg", "home = C:\\Python\n")
    found = environment_at(str(windows / "Scripts" / "python.exe"), EnvironmentSource.NAMED)
    assert found is not None and found.site_packages == (os.path.realpath(windows / "Lib" / "site-packages"),)


def test_site_packages_linked_out_of_the_environment_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "site-packages"
    elsewhere.mkdir(parents=True)
    env = tmp_path / "env"
    (env / "lib" / PY).mkdir(parents=True)
    _write(env / "pyvenv.cfg", "home = /x\n")
    os.symlink(elsewhere, env / "lib" / PY / "site-packages")
    assert environment_at(str(env), EnvironmentSource.NAMED) is None
    with pytest.raises(ConfigError):
        find_environment(str(env), EnvironmentSource.NAMED, None, {})


def test_no_environment_named_or_found(tmp_path: Path) -> None:
    assert find_environment(None, EnvironmentSource.NAMED, tmp_path, {}) is None
    assert find_environment(None, EnvironmentSource.NAMED, tmp_path, {"VIRTUAL_ENV": "relative"}) is None


def test_imported_modules_and_versions(tmp_path: Path) -> None:
    code = _write(
        tmp_path / "a.py",
        "import a.b, c as d\nfrom e.f import (g,\n h)\nfrom . import local\n    import nested.mod\n",
    )
    assert imported_modules([code]) >= {"a.b", "c", "e.f", "e.f.g", "nested.mod"}
    assert not any(name.startswith(".") for name in imported_modules([code]))
    make_venv(tmp_path / "env", version="2.5.1")
    assert installed_version(str(tmp_path / "env" / "lib" / PY / "site-packages"), "ourlib") == "2.5.1"


# ----------------------------------------------------------------------------- hostile packages


def test_links_and_broken_files_of_a_package_are_not_followed(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    outside = _write(isolated / "outside" / "evil.py", IMPL)
    os.symlink(outside, site / "ourlib" / "evil.py")
    _write(site / "ourlib" / "broken.py", "def (:\n")
    _write(site / "ourlib" / "__init__.py", INIT + "\nfrom ourlib import evil, broken\n")
    linked = isolated / "linked-pkg"
    _write(linked / "__init__.py", "import torch.distributed as dist\n\ndef wait():\n    dist.barrier()\n")
    os.symlink(linked, site / "linkedlib")  # an editable-style link: not an installed folder
    code = """
    import torch.distributed as dist

    import linkedlib
    import ourlib
    from ourlib.evil import reduce_now


    def step(tensor):
        if dist.get_rank() == 0:
            reduce_now(tensor)
            linkedlib.wait()
            ourlib.sync()  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)


def test_a_named_environment_that_is_not_one_is_an_error(isolated: Path) -> None:
    bug_file = _write(isolated / "project" / "bug.py", BUG)
    result = main(["check", str(bug_file), "--python", str(isolated / "no-such-env" / "bin" / "python")])
    assert result == 2


def test_star_and_relative_reexports(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    _write(site / "ourlib" / "__init__.py", 'from .comm import *\n\nraise SystemExit("executed")\n')
    bug_file = _write(isolated / "project" / "bug.py", BUG)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)
    private = """
    import torch.distributed as dist

    import ourlib


    def step(tensor):
        if dist.get_rank() == 0:
            ourlib._wait_all()
    """
    quiet = _write(isolated / "project" / "private.py", private)  # `import *` skips `_` names
    assert _codes(quiet, _settings(isolated, python=str(python))) == []


def test_namespace_package_and_version_from_record(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    (site / "ourlib-1.0.dist-info" / "METADATA").rename(site / "METADATA.moved")
    _write(site / "org" / "comm" / "__init__.py", "")  # `org/` has no __init__.py
    _write(site / "org" / "comm" / "layer.py", COMM.replace("from ._impl", "from org.comm._impl"))
    _write(site / "org" / "comm" / "_impl.py", IMPL)
    record = "org/comm/__init__.py,sha256=x,0\norg/comm/layer.py,sha256=x,1\n"
    _write(site / "in_house_comm-3.1.dist-info" / "RECORD", record)
    _write(site / "in_house_comm-3.1.dist-info" / "METADATA", "Metadata-Version: 2.1\nVersion: 3.1\n")
    assert installed_version(str(site), "org") == "3.1"
    code = """
    import torch.distributed as dist

    from org.comm.layer import Reducer


    def step(tensor):
        reducer = Reducer()
        if dist.get_rank() == 0:
            reducer.flush(tensor)  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)


def test_bundled_summary_of_the_installed_version(isolated: Path) -> None:
    """deepspeed is described by a catalog, so its source is never summarised; the summary
    bundled for 0.19.8 (bench/bundled_summaries.py) is used when exactly that version is installed."""
    site_root = isolated / "env"
    python = make_venv(site_root)
    site = site_root / "lib" / PY / "site-packages"
    _write(site / "deepspeed" / "__init__.py", 'raise SystemExit("deepspeed was executed")\n')
    dist_info = site / "deepspeed-0.19.8.dist-info"
    _write(dist_info / "METADATA", "Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.19.8\n")
    code = """
    import torch.distributed as dist

    from deepspeed.runtime.zero.utils import get_lst_from_rank0


    def step(values):
        if dist.get_rank() == 0:
            get_lst_from_rank0(values)  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    settings = _settings(isolated, python=str(python))
    assert _codes(bug_file, settings) == _expected(bug_file)
    dist_info.rename(site / "deepspeed-0.19.7.dist-info")
    _write(
        site / "deepspeed-0.19.7.dist-info" / "METADATA",
        "Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.19.7\n",
    )
    assert _codes(bug_file, _settings(isolated, python=str(python), cache=False)) == []
    assert "deepspeed" not in sys.modules


def test_helpers_imported_two_packages_up(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    _write(site / "ourlib" / "sub" / "__init__.py", "")
    _write(
        site / "ourlib" / "sub" / "deep.py",
        "from ..comm import _wait_all\n\n\ndef deep_sync():\n    _wait_all()\n",
    )
    code = """
    import torch.distributed as dist

    from ourlib.sub.deep import deep_sync


    def step():
        if dist.get_rank() == 0:
            deep_sync()  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)


def test_single_module_package(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    _write(site / "solo.py", "import torch.distributed as dist\n\n\ndef wait():\n    dist.barrier()\n")
    code = """
    import torch.distributed as dist

    import solo


    def step():
        if dist.get_rank() == 0:
            solo.wait()  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)


def test_environment_of_the_checked_files_themselves_and_empty_summaries(isolated: Path) -> None:
    project = isolated / "project"
    make_venv(project / ".venv")
    _write(project / "pyproject.toml", "[tool.collcheck]\ncache = false\n")
    site = project / ".venv" / "lib" / PY / "site-packages"
    _write(site / "quiet" / "__init__.py", "def helper():\n    return 1\n")
    code = BUG.replace("import ourlib\n", "import ourlib\nimport quiet\n")
    inside = _write(site / "vendored" / "bug.py", code)  # the venv's own code, checked alone
    assert _codes(inside, load_settings([inside])) == []
    bug_file = _write(project / "bug.py", code)
    result = check_paths([bug_file], load_settings([bug_file]))
    assert [f.code for f in result.findings] == ["CC001"]
    # quiet's summary is empty: left out; torch, imported and not installed there: its bundled one
    torch_summary = f"torch-{bundled_releases()['torch']}.toml"
    assert result.summaries == (torch_summary, "ourlib.summary.toml")


def test_subclasses_inherit_summarised_methods_they_do_not_change(isolated: Path) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    subclasses = """
    from ourlib.comm import Reducer


    class Wide(Reducer):
        factor = 2


    class Wider(Wide):
        def __init__(self):
            super().__init__(scale=4.0)


    class Local(Reducer):
        def _reduce(self, tensor):
            return tensor
    """
    _write(site / "ourlib" / "extra.py", subclasses)
    code = """
    import torch.distributed as dist

    from ourlib.extra import Local, Wide, Wider


    def step(tensor):
        wide, wider, local = Wide(), Wider(), Local()
        if dist.get_rank() == 0:
            local.flush(tensor)
            wide.flush(tensor)  # expect: CC001


    def other(tensor):
        wider = Wider()
        if dist.get_rank() == 0:
            wider.flush(tensor)  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)


def test_a_version_that_is_no_version_is_ignored(tmp_path: Path) -> None:
    make_venv(tmp_path / "env")
    site = tmp_path / "env" / "lib" / PY / "site-packages"
    _write(site / "ourlib-1.0.dist-info" / "METADATA", "Version: ../../../../etc/passwd\n")
    assert installed_version(str(site), "ourlib") is None


def test_summarize_by_name_in_an_environment(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_venv(isolated / "env")
    assert main(["summarize", "ourlib", "--python", str(python)]) == 0
    out = capsys.readouterr().out
    assert '"ourlib.sync"' in out and 'version = "1.0"' in out
    assert main(["summarize", "not_installed_here", "--python", str(python)]) == 2
    assert "not installed" in capsys.readouterr().err
    assert "ourlib" not in sys.modules


def test_editable_installs_are_named_not_read(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    _write(isolated / "elsewhere" / "edlib" / "__init__.py", "import torch.distributed as dist\n")
    _write(site / "__editable__.edlib-0.1.pth", str(isolated / "elsewhere") + "\n")
    direct_url = '{"url": "file:///elsewhere", "dir_info": {"editable": true}}'
    _write(site / "edlib-0.1.dist-info" / "direct_url.json", direct_url)
    _write(site / "edlib-0.1.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: edlib\nVersion: 0.1\n")
    bug_file = _write(
        isolated / "project" / "bug.py", BUG.replace("import ourlib\n", "import ourlib\nimport edlib\n")
    )
    assert main(["check", str(bug_file), "--python", str(python), "-v", "--format", "concise"]) == 1
    err = capsys.readouterr().err
    assert "edlib: an editable install, not read" in err and "ourlib.summary.toml" in err


def test_a_run_spends_a_bounded_time_summarising(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import collcheck.package_summaries as summaries

    python = make_venv(isolated / "env")
    bug_file = _write(isolated / "project" / "bug.py", BUG)
    monkeypatch.setattr(summaries, "RUN_SECONDS", 0.0)
    result = check_paths([bug_file], _settings(isolated, python=str(python)))
    assert result.findings == [] and result.summary_notes and "ourlib" in result.summary_notes[0]
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated / "user-cache"))
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)


def _corelib(site: Path, version: str, body: str) -> None:
    _write(site / "corelib" / "__init__.py", f"import torch.distributed as dist\n\n\ndef wait_all():\n{body}")
    for old in site.glob("corelib-*.dist-info"):
        (old / "METADATA").unlink()
        old.rmdir()
    _write(
        site / f"corelib-{version}.dist-info" / "METADATA",
        f"Metadata-Version: 2.1\nName: corelib\nVersion: {version}\n",
    )


def test_a_layer_on_another_installed_package(isolated: Path) -> None:
    """ourlib2 wraps corelib, another in-house package the checked code never imports: corelib is
    summarised first and ourlib2 with it; a new corelib version summarises ourlib2 again."""
    python = make_venv(isolated / "env")
    site = isolated / "env" / "lib" / PY / "site-packages"
    _corelib(site, "1.0", "    dist.barrier()\n")
    _write(
        site / "ourlib2" / "__init__.py", "from corelib import wait_all\n\n\ndef sync():\n    wait_all()\n"
    )
    _write(
        site / "ourlib2-3.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: ourlib2\nVersion: 3.0\n"
    )
    code = """
    import torch.distributed as dist

    import ourlib2


    def step():
        if dist.get_rank() == 0:
            ourlib2.sync()  # expect: CC001
    """
    bug_file = _write(isolated / "project" / "bug.py", code)
    assert _codes(bug_file, _settings(isolated, python=str(python))) == _expected(bug_file)
    _corelib(site, "1.1", "    return None\n")  # corelib 1.1 no longer communicates
    fresh = Settings(cache_dir=str(isolated / "other-project-cache"), python=str(python))
    assert _codes(bug_file, fresh) == []


SECTIONS = """
import torch.distributed as dist

from ourlib.comm import sync


class Section:
    \"\"\"Every rank enters and leaves together.\"\"\"

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        sync()
        return self

    def __exit__(self, *exc):
        dist.barrier()
        return False


class Gathered:
    def __init__(self, tensors, enabled=True):
        self.tensors = tensors
        self.enabled = enabled

    def __enter__(self):
        if self.enabled:
            dist.all_reduce(self.tensors[0])
        return self

    def __exit__(self, *exc):
        return False


class Timed:
    def __enter__(self):
        self.started = 0.0
        return self

    def __exit__(self, *exc):
        return False


def checkpoint(tensor):
    with Section("checkpoint"):
        return tensor.clone()


class Joined:
    async def __aenter__(self):
        dist.barrier()
        return self

    async def __aexit__(self, *exc):
        return False
"""

SECTIONS_BUG = """
import torch
import torch.distributed as dist

from ourlib.sections import Gathered, Joined, Section, Timed, checkpoint


def save(tensor, path):
    if dist.get_rank() == 0:
        with Section("save"):  # expect: CC001
            torch.save(tensor, path)


def save_copy(tensor, path):
    if dist.get_rank() == 0:
        torch.save(checkpoint(tensor), path)  # expect: CC001


def save_named(tensor, path):
    section = Section("save")
    if dist.get_rank() == 0:
        with Timed(), section as entered:  # expect: CC001
            torch.save((tensor, entered.name), path)


def gathered(tensor, flag, path):
    if dist.get_rank() == 0:
        with Gathered([tensor], enabled=flag):  # expect: CC001
            torch.save(tensor, path)


async def joined(tensor, path):
    if dist.get_rank() == 0:
        async with Joined():  # expect: CC001
            torch.save(tensor, path)


def gathered_on(tensor, path):
    held = Gathered([tensor], enabled=True)
    if dist.get_rank() == 0:
        with held:  # expect: CC001
            torch.save(tensor, path)
"""

SECTIONS_FIXED = """
import torch
import torch.distributed as dist

from ourlib.sections import Gathered, Joined, Section, Timed


def save(tensor, path):
    with Section("save"):
        if dist.get_rank() == 0:
            torch.save(tensor, path)


def timed(tensor, path):
    if dist.get_rank() == 0:
        with Timed():
            torch.save(tensor, path)


def gathered(tensor, flag, path):
    with Gathered([tensor], enabled=flag):
        if dist.get_rank() == 0:
            torch.save(tensor, path)


async def joined(tensor, path):
    async with Joined():
        if dist.get_rank() == 0:
            torch.save(tensor, path)


def gathered_off(tensor, path):
    held = Gathered([tensor], enabled=False)
    if dist.get_rank() == 0:
        with Gathered([tensor], enabled=False):
            torch.save(tensor, path)
        with held:
            torch.save(tensor, path)
"""


def test_context_managers_communicate_where_they_are_entered(isolated: Path) -> None:
    """A class whose `__enter__` (two calls deep) or `__exit__` communicates, entered on rank 0
    only: found at the `with`, for a class built there or bound before, and for `async with`; a
    condition on the receiver (`self.enabled`) that the call does not show is named, one the
    constructor's keyword shows (`__init__` keeps it: `[kept_arguments]`) decides. A function of
    the package that enters one (`checkpoint`) communicates through it."""
    python = make_venv(isolated / "env")
    _write(isolated / "env" / "lib" / PY / "site-packages" / "ourlib" / "sections.py", SECTIONS)
    project = isolated / "project"
    settings = _settings(isolated, python=str(python))
    bug_file = _write(project / "bug.py", SECTIONS_BUG)
    result = check_paths([bug_file], settings)
    findings = [f for checked in result.files for f in checked.findings]
    assert [(f.code, f.location.line) for f in findings] == _expected(bug_file)
    gathered = next(f for f in findings if f.location.line == _expected(bug_file)[3][1])
    assert "when self.enabled" in gathered.message
    decided = next(f for f in findings if f.location.line == _expected(bug_file)[-1][1])
    assert "when" not in decided.message  # `enabled=True` where it was built
    assert _codes(_write(project / "fixed.py", SECTIONS_FIXED), settings) == []
    assert "ourlib" not in sys.modules and "ourlib.sections" not in sys.modules
