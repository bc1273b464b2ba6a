"""A backward whose model's wrapping the file does not show (issue 24): in a file that trains under
torch.distributed, `loss.backward()` (and `accelerator.backward(loss)`, Lightning's backward of the
loss `training_step` returns) is taken as a possible DDP/FSDP gradient all-reduce. The finding says
so, at warning level, and `assume-wrapped-models = false` states the opposite."""

from __future__ import annotations

from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.catalog import CatalogError, load_catalog
from collcheck.config import ConfigError, load_settings
from collcheck.findings import Severity

RANK0_BACKWARD = """import torch.distributed as dist


def step(model, batch):
    loss = model(batch).mean()
    loss.backward()
    if dist.get_rank() == 0:
        model(batch).pow(2).mean().backward()
"""


def _run(tmp_path: Path, source: str, table: str = "") -> list[tuple[str, int, str, Severity]]:
    (tmp_path / "pyproject.toml").write_text(f"[tool.collcheck]\ncache = false\n{table}")
    (tmp_path / "train.py").write_text(source)
    settings = load_settings([tmp_path / "train.py"])
    result = check_paths([tmp_path / "train.py"], settings)
    assert not result.errors, result.errors
    return [(f.code, f.location.line, f.message, f.severity) for f in result.findings]


def test_the_finding_names_the_assumption_and_the_setting_at_warning_level(tmp_path: Path) -> None:
    [(code, line, message, severity)] = _run(tmp_path, RANK0_BACKWARD)
    assert (code, line, severity) == ("CC001", 8, Severity.WARNING)
    assert "DDP or FSDP wraps the model, which this file does not show" in message
    assert "`assume-wrapped-models = false`" in message


def test_assume_wrapped_models_false_drops_the_assumption(tmp_path: Path) -> None:
    assert _run(tmp_path, RANK0_BACKWARD, "assume-wrapped-models = false\n") == []


def test_the_setting_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.collcheck]\nassume-wrapped-models = "no"\n')
    with pytest.raises(ConfigError, match="assume-wrapped-models"):
        load_settings([tmp_path])


def test_no_assumption_without_evidence_of_distributed_training(tmp_path: Path) -> None:
    """A file that imports nothing of torch.distributed (nor a framework that sets it up) is no
    evidence that its models are wrapped: a collective of its own is still found."""
    source = RANK0_BACKWARD.replace("import torch.distributed as dist", "import torch\nimport os")
    source = source.replace("dist.get_rank()", 'int(os.environ["RANK"])')
    assert _run(tmp_path, source) == []


def test_a_visible_wrapper_is_not_assumed(tmp_path: Path) -> None:
    """Where the wrapper is visible its own collectives are reported (here DDP's forward, the first
    that rank 0 alone issues), as an error, with no assumption."""
    source = RANK0_BACKWARD.replace("def step(model, batch):", "def step(net, batch):\n    model = DDP(net)")
    source = "from torch.nn.parallel import DistributedDataParallel as DDP\n" + source
    [(code, _, message, severity)] = _run(tmp_path, source)
    assert (code, severity) == ("CC001", Severity.ERROR)
    assert message.startswith("ddp_") and "assume" not in message


def test_no_sync_suspends_the_assumed_reduction(tmp_path: Path) -> None:
    source = RANK0_BACKWARD.replace(
        "        model(batch).pow(2).mean().backward()",
        "        with model.no_sync():\n            model(batch).pow(2).mean().backward()",
    )
    assert _run(tmp_path, source) == []


LIGHTNING = """import torch
from lightning.pytorch import LightningModule


class Module(LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net{manual}

    def training_step(self, batch, batch_idx):
        try:
            loss = self.net(batch).mean()
        except torch.cuda.OutOfMemoryError:
            return None
        return loss
"""


def test_the_loss_a_training_step_returns_is_backward_through_the_strategy(tmp_path: Path) -> None:
    [(code, line, message, severity)] = _run(tmp_path, LIGHTNING.format(manual=""))
    assert (code, line, severity) == ("CC003", 14, Severity.WARNING)
    assert "a DDP or FSDP strategy wraps the model" in message


def test_a_module_that_runs_backward_itself_returns_nothing_backward_is_run_on(tmp_path: Path) -> None:
    manual = "\n        self.automatic_optimization = False"
    assert _run(tmp_path, LIGHTNING.format(manual=manual)) == []


def test_an_assumed_entry_needs_evidence_and_its_op_prefix(tmp_path: Path) -> None:
    catalog = tmp_path / "extra.toml"
    catalog.write_text('[[gradient_sync]]\nop = "my_backward"\nassumed = "DDP"\nevidence = ["torch"]\n')
    with pytest.raises(CatalogError, match="assumed"):
        load_catalog([catalog])
    catalog.write_text('[[gradient_sync]]\nop = "assumed_backward"\nassumed = "DDP"\n')
    with pytest.raises(CatalogError, match="evidence"):
        load_catalog([catalog])
