"""Conditional summaries over an object's configuration (docs/summaries.md, *Conditional
summaries*): a method that communicates only under a mode compared with a named member of a class
(`self.mode == Mode.SHARDED`), or under an attribute of an object the receiver holds
(`self.plugin.stage == 3`); the caller's visible configuration decides, and where it shows none the
finding names the configuration that makes the call a hang. The package is summarised from its
source in a separate environment, never imported."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.config import Settings
from collcheck.package_summaries import make_summary
from collcheck.static.summary_conditions import NamedConstant, decide

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"

RUNNER = """
import enum

import torch.distributed as dist


class Mode(str, enum.Enum):
    LOCAL = "LOCAL"
    SHARDED = "SHARDED"
    STAGED = "STAGED"


class Plugin:
    def __init__(self, stage=1, offload=False):
        self.stage = stage
        self.offload = offload


def _gather_shards(path):
    dist.barrier()
    return path


class Runner:
    def __init__(self, mode=Mode.LOCAL, plugin=None):
        self.mode = mode
        self.plugin = plugin
        self.saved = 0

    def save(self, path):
        self.saved += 1
        if self.mode == Mode.STAGED:
            return path
        elif self.mode == Mode.SHARDED:
            _gather_shards(path)
        return path

    def export(self, tensor):
        if self.plugin.stage == 3:
            dist.all_reduce(tensor)
        return tensor
"""

BUG = """
import torch.distributed as dist
from cfglib import Mode, Plugin, Runner


def shown_sharded(path):
    runner = Runner(mode=Mode.SHARDED)
    if dist.get_rank() == 0:
        runner.save(path)  # expect: CC001


def unknown_mode(runner: Runner, path):
    if dist.get_rank() == 0:
        runner.save(path)  # expect: CC001


def shown_stage(tensor):
    runner = Runner(plugin=Plugin(stage=3))
    if dist.get_rank() == 0:
        runner.export(tensor)  # expect: CC001


def unknown_stage(runner: Runner, tensor):
    if dist.get_rank() == 0:
        runner.export(tensor)  # expect: CC001
"""

FIXED = """
import torch.distributed as dist
from cfglib import Mode, Plugin, Runner


def shown_local(path):
    runner = Runner(mode=Mode.LOCAL)
    if dist.get_rank() == 0:
        runner.save(path)


def shown_staged(path):
    runner = Runner(mode=Mode.STAGED)
    if dist.get_rank() == 0:
        runner.save(path)


def shown_stage_one(tensor):
    runner = Runner(plugin=Plugin(stage=1))
    if dist.get_rank() == 0:
        runner.export(tensor)


def every_rank(runner: Runner, path, tensor):
    runner.save(path)
    runner.export(tensor)
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A virtualenv holding `cfglib` (its bin/python links to nothing); its interpreter's path."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    root = tmp_path / "env"
    site = root / "lib" / PY / "site-packages"
    _write(
        root / "pyvenv.cfg",
        f"home = /nonexistent\nversion = {sys.version_info.major}.{sys.version_info.minor}.0\n",
    )
    _write(site / "cfglib" / "__init__.py", "from .runner import Mode, Plugin, Runner\n")
    _write(site / "cfglib" / "runner.py", RUNNER)
    _write(site / "cfglib-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: cfglib\nVersion: 1.0\n")
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(root / "nowhere" / "python3")
    return root / "bin" / "python"


def _expected(path: Path) -> list[int]:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if "# expect: CC001" in line]


def test_a_mode_or_a_plugin_decides_where_the_call_shows_it(environment: Path, tmp_path: Path) -> None:
    settings = Settings(cache_dir=str(tmp_path / "project-cache"), python=str(environment))
    bug = _write(tmp_path / "project" / "bug.py", BUG)
    result = check_paths([bug], settings)
    assert all(f.error is None for f in result.files), [f.error for f in result.files]
    findings = {f.location.line: f for checked in result.files for f in checked.findings}
    assert sorted(findings) == _expected(bug)
    messages = [findings[line].message for line in _expected(bug)]
    assert "when" not in messages[0]  # `Runner(mode=Mode.SHARDED)`: decided
    assert "(a collective when self.mode == Mode.SHARDED)" in messages[1]
    assert "when" not in messages[2]  # `Runner(plugin=Plugin(stage=3))`: decided
    assert "(a collective when self.plugin.stage == 3)" in messages[3]
    fixed = _write(tmp_path / "project" / "fixed.py", FIXED)
    assert [f.code for checked in check_paths([fixed], settings).files for f in checked.findings] == []
    assert "cfglib" not in sys.modules


def test_named_members_compare_by_name() -> None:
    """Two named members are equal when they name the same member; a member against a literal,
    or an ordering of members, is undecided."""
    values: dict[str, object] = {
        "self.mode": NamedConstant("Mode.LOCAL"),
        "Mode.SHARDED": NamedConstant("Mode.SHARDED"),
    }

    def read(node: ast.expr) -> object:
        return values[ast.unparse(node)]

    assert decide("self.mode == Mode.SHARDED", read) is False
    assert decide("self.mode != Mode.SHARDED", read) is True
    assert decide("self.mode < Mode.SHARDED", read) is None
    values["self.mode"] = NamedConstant("Mode.SHARDED")
    assert decide("self.mode == Mode.SHARDED", read) is True
    values["self.mode"] = "SHARDED"  # a literal against a member: its value is not known here
    assert decide("self.mode == Mode.SHARDED", read) is None


def test_the_summary_carries_the_configuration_and_the_keywords_that_decide_it(environment: Path) -> None:
    """`save` communicates under `self.mode == Mode.SHARDED` only because two members of `Mode`
    are told apart (the `STAGED` path returns first); `export` under the held plugin's stage. The
    constructors keep `mode`, `plugin` and the plugin's `stage`, and `Plugin` is a known type."""
    site = environment.parent.parent / "lib" / PY / "site-packages"
    document = make_summary(str(site), "cfglib", ["cfglib"], Settings(), "1.0")
    when = {entry["method"]: entry.get("when") for entry in document["method"]}
    assert when == {"save": "self.mode == Mode.SHARDED", "export": "self.plugin.stage == 3"}
    assert document["kept_arguments"] == {
        "cfglib.runner.Plugin": "stage",
        "cfglib.runner.Runner": "mode,plugin",
    }
    assert document["types"]["cfglib.Plugin"] == "cfglib.runner.Plugin"
