"""How far an assumed gradient reduction reaches (loader.followed_as_communicating): a backward
that is a collective only by assumption (a model wrapped out of sight, gradient_sync.py) is
followed in the file that runs it, through that file's own helpers, but a function of another
file that communicates only that way is no helper worth following, and the project's index does
not count it. The trade-off, measured on the installed torch tree as the project: following them
made every caller of a backward, through any number of files, a helper to model (about 2,100
module builds instead of 400, a 3x slower cold run); what it costs is the cross-file shape below."""

from __future__ import annotations

import ast
from pathlib import Path

from collcheck.api import check_paths
from collcheck.catalog import settings_catalog
from collcheck.config import load_settings
from collcheck.static.loader import build_module, followed_as_communicating
from collcheck.static.prefilter import rank_words, trigger_pattern
from collcheck.static.project import file_facts

STEPS = """import torch.distributed as dist


def train_step(model, batch):
    loss = model(batch).mean()
    loss.backward()


def epoch(model, batches):
    for batch in batches:
        train_step(model, batch)


def synced_step(model, batch):
    train_step(model, batch)
    dist.barrier()
"""

# The checked file runs the helper of another file on rank 0 only.
CALLER = """import torch.distributed as dist

from steps import {helper}


def fit(model, batch):
    {helper}(model, batch)
    if dist.get_rank() == 0:
        {helper}(model, batch)
"""

# The same program in one file: the assumed reduction of the in-file helper is followed.
ALONE = STEPS + CALLER.split("\n", 3)[3].format(helper="train_step")


def _check(
    tmp_path: Path, files: dict[str, str], checked: list[str], table: str = "cache = false\n"
) -> list[tuple[str, str, int, str]]:
    (tmp_path / "pyproject.toml").write_text(f"[tool.collcheck]\n{table}")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [tmp_path / name for name in checked]
    result = check_paths(paths, load_settings(paths))
    assert not result.errors, result.errors
    return sorted((f.code, Path(f.location.path).name, f.location.line, f.message) for f in result.findings)


def test_an_in_file_helper_that_runs_backward_is_followed(tmp_path: Path) -> None:
    [(code, path, line, message)] = _check(tmp_path, {"alone.py": ALONE}, ["alone.py"])
    assert (code, path) == ("CC001", "alone.py")
    assert message.startswith("assumed_ddp_backward at alone.py:6 ")
    assert ALONE.splitlines()[line - 1].strip() == "train_step(model, batch)"


def test_a_helper_of_another_file_that_only_runs_backward_is_not_followed(tmp_path: Path) -> None:
    """The trade-off: the cross-file shape of the test above is not seen (it was before the
    assumption stopped at the file boundary)."""
    files = {"steps.py": STEPS, "train.py": CALLER.format(helper="train_step")}
    assert _check(tmp_path, files, ["train.py"]) == []
    files["train.py"] = CALLER.format(helper="epoch")  # its in-file helper runs it: the same
    assert _check(tmp_path, files, ["train.py"]) == []


def test_a_helper_of_another_file_that_communicates_is_followed_with_its_backward(tmp_path: Path) -> None:
    """A helper followed for a real collective is followed whole: its own in-file helper's
    assumed reduction comes first on rank 0's path, in the helper's file."""
    files = {"steps.py": STEPS, "train.py": CALLER.format(helper="synced_step")}
    [(code, path, _, message)] = _check(tmp_path, files, ["train.py"])
    assert (code, path) == ("CC001", "train.py")
    assert message.startswith("assumed_ddp_backward at steps.py:6 ")


def test_the_answer_for_a_file_does_not_depend_on_the_files_checked_with_it(tmp_path: Path) -> None:
    """A model is a function of its file alone (one `ModuleInfo` serves the file checked and the
    file met as a helper, whichever comes first), so the helper's file answers the same checked
    alone, after or before the file that imports it, and from a warm cache."""
    files = {"steps.py": STEPS + CALLER.split("\n", 3)[3].format(helper="epoch")}
    files["train.py"] = CALLER.format(helper="train_step")
    alone = _check(tmp_path, files, ["steps.py"])
    assert [(code, path) for code, path, _, _ in alone] == [("CC001", "steps.py")]
    assert _check(tmp_path, files, ["train.py", "steps.py"]) == alone
    assert _check(tmp_path, files, ["steps.py", "train.py"]) == alone
    cached = 'cache-dir = ".collcheck_cache"\n'
    assert _check(tmp_path, files, ["train.py", "steps.py"], cached) == alone  # cold
    assert _check(tmp_path, files, ["steps.py", "train.py"], cached) == alone  # warm


def test_the_index_does_not_count_a_function_that_only_runs_backward(tmp_path: Path) -> None:
    settings = load_settings([tmp_path])
    catalog = settings_catalog(settings)
    facts = file_facts(STEPS, trigger_pattern(catalog), rank_words(catalog))
    assert facts.triggered  # the file is still analysed for its own backward sites
    assert facts.hits == ("synced_step",)


def test_the_model_marks_what_communicates_only_by_assumption(tmp_path: Path) -> None:
    catalog = settings_catalog(load_settings([tmp_path]))
    module = build_module(ast.parse(STEPS), "steps.py", catalog, text=STEPS)
    names = {f.name: f for f in module.functions.values()}
    assert {f.name for f in module.communicating} == {"train_step", "epoch", "synced_step"}
    assert {f.name for f in module.assumed_only} == {"train_step", "epoch"}
    assert followed_as_communicating(module, names["epoch"], same_file=True)
    assert not followed_as_communicating(module, names["epoch"], same_file=False)
    assert followed_as_communicating(module, names["synced_step"], same_file=False)
