"""A process lets other files' models go between files (static/retained.py): answers unchanged."""

from __future__ import annotations

import ast
import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

from collcheck import api
from collcheck.config import Settings
from collcheck.findings import Finding
from collcheck.static import loader, retained

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def findings_of(folder: Path) -> list[Finding]:
    result = api.check_paths([folder], Settings(root=str(folder), cache=False, jobs=1))
    assert not [file.error for file in result.files if file.error]
    return [finding for file in result.files for finding in file.findings]


@pytest.mark.parametrize("area", ["CC001", "semantics", "frameworks"])
def test_dropping_other_files_before_every_file_changes_no_finding(
    area: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = FIXTURES / area
    if not folder.is_dir():
        pytest.skip(f"no fixtures/{area}")
    loader.forget_loaded(0)
    kept = findings_of(folder)
    assert kept, f"fixtures/{area} should give findings"
    dropped: list[bool] = []
    release = retained.release_between_files

    def counted() -> bool:
        dropped.append(release())
        return dropped[-1]

    monkeypatch.setattr(loader, "MAX_LOADED_MODULES", 0)
    monkeypatch.setattr(retained, "release_between_files", counted)
    loader.forget_loaded(0)
    assert findings_of(folder) == kept
    assert any(dropped), "the bound of 0 should have dropped the models at least once"


def test_the_bound_is_kept_between_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(6):
        (tmp_path / f"helper_{index}.py").write_text(
            "import torch.distributed as dist\n\n\ndef sync():\n    dist.barrier()\n"
        )
    calls = "\n".join(f"        helper_{index}.sync()" for index in range(6))
    imports = "\n".join(f"import helper_{index}" for index in range(6))
    (tmp_path / "train.py").write_text(
        f"import torch.distributed as dist\n{imports}\n\n\n"
        f"def step():\n    if dist.get_rank() == 0:\n{calls}\n"
    )
    monkeypatch.setattr(loader, "MAX_LOADED_MODULES", 2)
    loader.forget_loaded(0)
    found = findings_of(tmp_path)
    assert any(finding.code == "CC001" for finding in found)
    retained.release_between_files()
    assert not loader.forget_loaded(2), "more than the bound kept after a release"


def test_dropped_models_die_without_a_full_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Models, their trees and the interpreters that ran them hold no reference cycle: once
    dropped they are freed by reference count (a full collection between files costs a scan of
    everything alive). Helpers over the budget and summaries reused across files included."""
    for index in range(3):
        (tmp_path / f"helper_{index}.py").write_text(
            "import torch.distributed as dist\n\n\n"
            "def sync(flag):\n    for _ in range(3):\n        if flag:\n            dist.barrier()\n"
            "    dist.all_reduce(flag)\n"
        )
    calls = "\n".join(
        f"        helper_{index}.sync(True)\n        helper_{index}.sync(False)" for index in range(3)
    )
    imports = "\n".join(f"import helper_{index}" for index in range(3))
    (tmp_path / "train.py").write_text(
        f"import torch.distributed as dist\n{imports}\n\n\n"
        f"def step():\n    if dist.get_rank() == 0:\n{calls}\n"
    )
    trees: list[weakref.ref[ast.AST]] = []
    parse = ast.parse

    def watched(*args: Any, **kwargs: Any) -> Any:
        tree = parse(*args, **kwargs)
        if isinstance(tree, ast.Module):
            trees.append(weakref.ref(tree))
        return tree

    loader.forget_loaded(0)
    gc.collect()
    monkeypatch.setattr(ast, "parse", watched)
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)  # as if the release collected nothing
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        found = findings_of(tmp_path)
        monkeypatch.setattr(loader, "MAX_LOADED_MODULES", 0)
        assert retained.release_between_files()
        alive = [tree for tree in (ref() for ref in trees) if tree is not None]
    finally:
        if was_enabled:
            gc.enable()
    assert any(finding.code == "CC001" for finding in found)
    assert len(trees) >= 4, "the run's files (train.py and its helpers) should have been parsed"
    assert not alive, f"{len(alive)} dropped trees still alive: held by a reference cycle"


def test_a_file_that_runs_no_collective_is_neither_completed_nor_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It names a collective (the prefilter selects it) but no function of it issues one: its
    globals and class attributes, read only by runs of its code, are not computed, and its model
    is not kept for other files; the file beside it that does communicate still is, with its
    finding."""
    from collcheck.static import engine

    (tmp_path / "quiet_names.py").write_text(
        "import torch.distributed as dist\n\nLIMIT = 4\n\n\ndef handler():\n    return dist.barrier\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\n\n\ndef step():\n    if dist.get_rank() == 0:\n"
        "        dist.barrier()\n"
    )
    completed: list[str] = []
    complete = engine.complete_module

    def counted(module: Any, interpreter: Any) -> None:
        completed.append(Path(module.path).name)
        complete(module, interpreter)

    monkeypatch.setattr(engine, "complete_module", counted)
    loader.forget_loaded(0)
    result = api.check_paths([tmp_path], Settings(root=str(tmp_path), cache=False, jobs=1))
    by_file = {Path(file.path).name: [f.code for f in file.findings] for file in result.files}
    assert by_file == {"quiet_names.py": [], "train.py": ["CC001"]}
    assert completed == ["train.py"]
    kept = {Path(path.rsplit(":", 1)[-1]).name for path in loader._LOADED}
    assert "train.py" in kept and "quiet_names.py" not in kept
