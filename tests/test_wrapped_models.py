"""Calls that communicate without naming a collective: the catalog entries match the installed
torch, and a wrapped model's type follows it into helpers, methods and in-place wrappers."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.catalog import bundled_catalog_dir, load_catalog
from collcheck.config import load_settings

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def _wrapper_ops() -> list[dict[str, object]]:
    data = tomllib.loads((bundled_catalog_dir() / "torch_wrappers.toml").read_text(encoding="utf-8"))
    return list(data["op"])


@pytest.mark.parametrize("entry", _wrapper_ops(), ids=lambda entry: str(entry["names"][0]))  # type: ignore[index]
def test_differentiable_collectives_match_torch(entry: dict[str, object]) -> None:
    pytest.importorskip("torch")
    for name in entry["names"]:  # type: ignore[attr-defined]
        module_name, _, attribute = str(name).rpartition(".")
        function = getattr(importlib.import_module(module_name), attribute)
        params = tuple(inspect.signature(function).parameters)
        assert params == tuple(entry["params"]), name  # type: ignore[arg-type]


def test_wrapper_types_exist_in_torch() -> None:
    pytest.importorskip("torch")
    catalog = load_catalog()
    for factory, type_name in catalog.types.items():
        if not factory.startswith("torch."):
            continue
        module_name, _, attribute = factory.rpartition(".")
        assert hasattr(importlib.import_module(module_name), attribute), factory
        if type_name:
            module_name, _, attribute = type_name.rpartition(".")
            assert hasattr(importlib.import_module(module_name), attribute), type_name


def _codes(tmp_path: Path, source: str) -> set[tuple[int, str]]:
    path = tmp_path / "train.py"
    path.write_text(source, encoding="utf-8")
    settings = load_settings([path]).with_overrides(jobs=1, cache=False)
    result = check_paths([path], settings)
    assert not result.errors
    return {(f.location.line, f.code) for f in result.findings}


def test_unwrapped_module_of_a_helper_argument_is_quiet(tmp_path: Path) -> None:
    source = (
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def show(m, x):\n"
        "    return m(x)\n"
        "def main(net, x):\n"
        "    model = DDP(net)\n"
        "    if dist.get_rank() == 0:\n"
        "        show(model.module, x)\n"
        "        unwrapped = model.module\n"
        "        unwrapped(x)\n"
    )
    assert _codes(tmp_path, source) == set()


def test_wrapped_model_reaches_a_helper(tmp_path: Path) -> None:
    source = (
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def show(m, x):\n"
        "    return m.forward(x)\n"
        "def main(net, x):\n"
        "    model = DDP(net)\n"
        "    if dist.get_rank() == 0:\n"
        "        show(model, x)\n"
    )
    assert _codes(tmp_path, source) == {(8, "CC001")}
