"""Bundled summaries of pinned framework releases (rules/summaries/, bench/bundled_summaries.py),
used for the frameworks a run's files import when no environment installs them, and conditional
summaries (`when`): what a call site shows of the configuration decides."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.bundled_summaries import (
    BUNDLED_SUMMARIES,
    bundled_packages_imported,
    bundled_releases,
    bundled_summary,
    with_bundled_summaries,
)
from collcheck.catalog import CatalogError, load_catalog
from collcheck.config import Settings
from collcheck.static.summary_conditions import UNDECIDED, decide

DEEPSPEED_HELPER = """
import torch.distributed as dist

from deepspeed.runtime.zero.utils import get_lst_from_rank0


def step(values):
    if dist.get_rank() == 0:
        get_lst_from_rank0(values)  # expect: CC001
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def _lines(path: Path) -> list[tuple[str, int]]:
    result = check_paths([path], Settings(cache=False, jobs=1))
    assert all(f.error is None for f in result.files)
    return [(finding.code, finding.location.line) for f in result.files for finding in f.findings]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return tmp_path


def test_every_pinned_framework_has_one_bundled_release() -> None:
    releases = bundled_releases()
    for package in (
        "deepspeed",
        "megatron",
        "accelerate",
        "transformers",
        "lightning",
        "torchmetrics",
        "torch",
    ):
        assert package in releases, package
        assert len(list(BUNDLED_SUMMARIES.glob(f"{package}-*.toml"))) == 1, package
    load_catalog(summaries=sorted(BUNDLED_SUMMARIES.glob("*.toml")))  # every one reads back


def test_a_framework_not_installed_is_read_from_its_bundled_summary(isolated: Path) -> None:
    bug = _write(isolated / "project" / "bug.py", DEEPSPEED_HELPER)
    assert _lines(bug) == [("CC001", 8)]


def test_the_frameworks_own_source_is_checked_without_its_summary(isolated: Path) -> None:
    own = _write(isolated / "deepspeed" / "runtime" / "step.py", DEEPSPEED_HELPER)
    settings = with_bundled_summaries(Settings(), None, [own])
    assert [name.split("-")[0] for name, _ in settings.summary_documents] == ["torch"]  # not its own
    torch_own = _write(isolated / "torch" / "distributed" / "step.py", DEEPSPEED_HELPER)
    assert [
        name.split("-")[0]
        for name, _ in with_bundled_summaries(Settings(), None, [torch_own]).summary_documents
    ] == ["deepspeed"]
    other = _write(isolated / "project" / "step.py", DEEPSPEED_HELPER)
    names = [name for name, _ in with_bundled_summaries(Settings(), None, [other]).summary_documents]
    releases = bundled_releases()
    assert names == [f"deepspeed-{releases['deepspeed']}.toml", f"torch-{releases['torch']}.toml"]


def test_files_that_import_no_framework_read_nothing(isolated: Path) -> None:
    plain = _write(isolated / "plain.py", "import os\n# from deepspeed import x, in a comment\n")
    mention = _write(isolated / "mention.py", "text = 'import deepspeed'\n")
    assert bundled_packages_imported([plain]) == set()
    assert with_bundled_summaries(Settings(), None, [plain]).summary_documents == ()
    assert bundled_packages_imported([mention]) == set()  # matched, then its imports read: none


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("validate", {"validate": True}, True),
        ("validate", {"validate": False}, False),
        ("validate", {}, None),
        ("validate or strict == 'all'", {"validate": False, "strict": "all"}, True),
        ("validate or strict == 'all'", {"validate": False}, None),
        ("validate or strict == 'all'", {"validate": True}, True),
        ("self.sharded and not offload", {"offload": True}, False),
        ("self.sharded and not offload", {"offload": False}, None),
        ("stage >= 3", {"stage": 2}, False),
        ("stage >= 3", {"stage": "x"}, None),
    ],
)
def test_a_condition_is_decided_with_three_values(
    text: str, values: dict[str, object], expected: bool | None
) -> None:
    def literal(node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        name = node.id if isinstance(node, ast.Name) else ""
        return values.get(name, UNDECIDED)

    assert decide(text, literal) is expected


def test_a_condition_names_only_parameters_and_the_receiver(tmp_path: Path) -> None:
    good = _write(
        tmp_path / "good.toml",
        '[[op]]\nop = "barrier"\nnames = ["lib.f"]\nparams = ["flag"]\nwhen = "flag and self.on"\n'
        "defaults = {flag = true}\n",
    )
    spec = load_catalog(summaries=[good]).functions["lib.f"]
    assert (spec.when, spec.when_defaults) == ("flag and self.on", (("flag", True),))
    bad = _write(tmp_path / "bad.toml", '[[op]]\nop = "barrier"\nnames = ["lib.f"]\nwhen = "other"\n')
    with pytest.raises(CatalogError, match="other"):
        load_catalog(summaries=[bad])
    broken = _write(tmp_path / "broken.toml", '[[op]]\nop = "barrier"\nnames = ["lib.f"]\nwhen = "a +"\n')
    with pytest.raises(CatalogError, match="not a Python expression"):
        load_catalog(summaries=[broken])


def test_a_warm_run_stats_the_files_instead_of_reading_them(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collcheck.bundled_summaries as bundled

    settings = Settings(cache_dir=str(isolated / "project-cache"))
    source = _write(isolated / "project" / "step.py", DEEPSPEED_HELPER)
    first = with_bundled_summaries(settings, None, [source]).summary_documents
    assert [name.split("-")[0] for name, _ in first] == ["deepspeed", "torch"]

    original = bundled.read_regular_file

    def unread(path: Path, limit: int) -> bytes:
        assert path != source, "the checked file was read again"
        return original(path, limit)

    monkeypatch.setattr(bundled, "read_regular_file", unread)
    assert with_bundled_summaries(settings, None, [source]).summary_documents == first
    monkeypatch.undo()
    _write(source, "import os\n")  # another size: read again, and it imports no framework now
    assert with_bundled_summaries(settings, None, [source]).summary_documents == ()


CONDITIONAL_PACKAGE = """
import torch.distributed as dist


def begin_then_differ(tensor, small):
    dist.barrier()
    if tensor.numel() < small:
        dist.all_reduce(tensor)
    else:
        dist.broadcast(tensor, 0)


def only_on_data(tensor):
    if tensor.numel() > 0:
        dist.all_reduce(tensor)


def validated(state, validate=True, strict="assume"):
    if validate or strict.startswith("x"):
        dist.all_gather_object([None], state)


class Saver:
    def __init__(self, sharded):
        self.sharded = sharded

    def save(self, model):
        if self.sharded:
            dist.barrier()
        return model
"""


def test_what_summaries_learn_from_paths_that_differ(tmp_path: Path) -> None:
    """Paths that go on differently keep what they all begin with; collectives that depend on data
    leave the function out; those the configuration decides carry the condition."""
    from collcheck.package_summaries import make_summary

    _write(tmp_path / "site" / "condlib" / "__init__.py", CONDITIONAL_PACKAGE)
    document = make_summary(str(tmp_path / "site"), "condlib", ["condlib"], Settings(), "1.0")
    ops = {name: entry for entry in document["op"] for name in entry["names"]}
    assert ops["condlib.begin_then_differ"]["op"] == "barrier"
    assert "when" not in ops["condlib.begin_then_differ"]
    assert "condlib.only_on_data" not in ops
    assert (ops["condlib.validated"]["when"], ops["condlib.validated"]["defaults"]) == (
        "validate",
        {"validate": True},
    )
    (save,) = [entry for entry in document["method"] if entry["method"] == "save"]
    assert save["when"] == "self.sharded"


LAZY_GROUP_BASE = """
class Channel:
    def __init__(self):
        self._pg = None

    @property
    def pg(self):
        if self._pg is None:
            raise RuntimeError("this channel holds no group")
        return self._pg
"""

LAZY_GROUP_TORCH = """
import torch.distributed as dist

from relaylib.channels.base import Channel


class TorchChannel(Channel):
    @property
    def pg(self):
        if self._pg is None:
            self._pg = dist.GroupMember.WORLD
        return super().pg

    @property
    def position(self):
        return dist.get_rank(self.pg)

    def total(self, tensor):
        dist.all_reduce(tensor, group=self.pg)
        return tensor

    def spread(self, tensor, src):
        dist.broadcast(tensor, src, group=self.pg)
        return tensor

    def collect(self, items, item):
        dist.all_gather_object(items, item, group=self.pg)
        return items
"""

LAZY_GROUP_LOCAL = """
import torch.distributed as dist


class Pool:
    def __init__(self):
        self._pg = None

    @property
    def pg(self):
        if self._pg is None:
            self._pg = dist.group.WORLD
        return self._pg

    def total(self, tensor):
        dist.all_reduce(tensor, group=self.pg)


class Handed:
    def __init__(self):
        self._pg = dist.group.WORLD

    def total(self, tensor, group=None):
        if group is not None:
            self._pg = group  # the caller's group, when it passes one
        dist.all_reduce(tensor, group=self._pg)
"""


def test_regenerating_a_group_filled_by_a_getter_keeps_the_methods(tmp_path: Path) -> None:
    """A group read through a `@property` that fills it on first read (`if self._pg is None:
    self._pg = WORLD`, then the base's getter in another file or the attribute itself) is the
    receiver's group: every method on it is summarised, as before getters that store were run on
    every read. A group a method may take from its arguments is not the object's."""
    from collcheck.package_summaries import make_summary
    from collcheck.summarize import package_modules

    site = tmp_path / "site"
    _write(site / "relaylib" / "__init__.py", "from relaylib.channels.torch_channel import TorchChannel\n")
    _write(site / "relaylib" / "channels" / "__init__.py", "")
    _write(site / "relaylib" / "channels" / "base.py", LAZY_GROUP_BASE)
    _write(site / "relaylib" / "channels" / "torch_channel.py", LAZY_GROUP_TORCH)
    _write(site / "relaylib" / "local.py", LAZY_GROUP_LOCAL)
    modules = package_modules(str(site), "relaylib")
    document = make_summary(str(site), "relaylib", modules, Settings(), "1.0", len(modules) + 1)
    methods = {(entry["receiver"][0], entry["method"]): entry for entry in document.get("method", [])}
    channel = "relaylib.channels.torch_channel.TorchChannel"
    for name, op in (("total", "all_reduce"), ("spread", "broadcast"), ("collect", "all_gather_object")):
        assert methods[(channel, name)]["op"] == op
        assert methods[(channel, name)]["default_group"] == f"{channel}.pg"
    assert methods[("relaylib.local.Pool", "total")]["default_group"] == "relaylib.local.Pool._pg"
    assert ("relaylib.local.Handed", "total") not in methods


def test_a_hand_written_method_wins_over_a_summarised_one(tmp_path: Path) -> None:
    """A call matches the first method entry that fits: the hand-written one, whatever the order
    of the sources (summaries are read first), as a hand-written function wins by its name."""
    summarised = _write(
        tmp_path / "lib.summary.toml",
        '[[method]]\nop = "all_gather"\nmethod = "sync"\nreceiver = ["lib.Engine"]\nparams = []\n'
        '[[method]]\nop = "barrier"\nmethod = "flush"\nreceiver = ["lib.Engine"]\nparams = []\n'
        '[[op]]\nop = "all_gather"\nnames = ["lib.f"]\nparams = []\n',
    )
    written = _write(
        tmp_path / "lib.toml",
        '[[method]]\nop = "all_reduce"\nmethod = "sync"\nreceiver = ["lib.Engine"]\nparams = []\n'
        '[[op]]\nop = "all_reduce"\nnames = ["lib.f"]\nparams = []\n',
    )
    catalog = load_catalog([written], summaries=[summarised])
    assert [m.spec.op for m in catalog.method_specs("sync")] == ["all_reduce", "all_gather"]
    assert [m.spec.op for m in catalog.method_specs("flush")] == ["barrier"]  # nothing hides it
    assert catalog.functions["lib.f"].op == "all_reduce"
    alone = load_catalog(summaries=[summarised])  # no user catalog: the bundled ones come after
    assert [m.spec.op for m in alone.method_specs("sync")] == ["all_gather"]


def test_an_installed_build_of_a_pinned_release_reads_its_summary() -> None:
    """`2.13.0+cpu` (a local label: torch's CPU wheel) is the source of the pinned `2.13.0`."""
    release = bundled_releases()["torch"]
    assert bundled_summary("torch", f"{release}+cpu") == bundled_summary("torch", release)
    found = bundled_summary("torch", f"{release}+cu128")
    assert found is not None and found[0] == f"torch-{release}.toml"
    assert bundled_summary("torch", "0.0.1+cpu") is None
    assert bundled_summary("torch", None) is None
