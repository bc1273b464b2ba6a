"""Backward through a data-parallel wrapper's output (collcheck/static/gradient_sync.py): the
catalog's `[[gradient_sync]]` entries, the provenance that values carry, and the events a
backward issues, paused by `no_sync`, on the wrapper's group."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from collcheck.api import analyze_text
from collcheck.catalog import CatalogError, load_catalog
from collcheck.static.symbolic import RANK, Atom, BinOp, GradSync, opaque, synced_in


def _codes(source: str) -> list[tuple[int, str]]:
    result = analyze_text(textwrap.dedent(source), "train.py")
    assert result.error is None, result.error
    return sorted((f.location.line, f.code) for f in result.findings)


def test_catalog_declares_the_wrappers_whose_backward_reduces() -> None:
    syncs = {sync.spec.op: sync for sync in load_catalog().gradient_syncs}
    assert syncs["ddp_backward"].wrappers == ("torch.nn.parallel.DistributedDataParallel",)
    assert syncs["ddp_backward"].group == "process_group"
    assert "no_sync" in syncs["ddp_backward"].paused_by
    assert "torch.distributed.fsdp.FSDPModule" in syncs["fsdp_backward"].wrappers
    assert "accelerate.Accelerator.backward" in syncs["prepared_model_backward"].functions


def test_ddp_constructor_names_the_group_keyword() -> None:
    torch_ddp = pytest.importorskip("torch.nn.parallel")
    group = next(s.group for s in load_catalog().gradient_syncs if s.spec.op == "ddp_backward")
    assert group in inspect.signature(torch_ddp.DistributedDataParallel.__init__).parameters


def test_malformed_entry_is_a_catalog_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[gradient_sync]]\nop = "ddp_backward"\n', encoding="utf-8")
    with pytest.raises(CatalogError, match="gradient_sync #1"):
        load_catalog([bad])


def test_opaque_values_carry_the_union_of_their_inputs() -> None:
    ddp, fsdp = GradSync("ddp_backward"), GradSync("fsdp_backward")
    out = Atom("result:ddp_forward@3:4", "shared", synced=frozenset({ddp}))
    other = Atom("result:fsdp_forward@5:4", "shared", synced=frozenset({fsdp}))
    loss = opaque("call:criterion(out, other)", (BinOp("+", out, RANK), other))
    assert loss.synced == {ddp, fsdp}
    assert loss.kind == "perrank"  # the rank still wins
    assert synced_in((BinOp("*", loss, Atom("scale", "shared")),)) == {ddp, fsdp}


RANK0_EXTRA = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def step(net, batch):
        model = DDP(net{group})
        out = model(batch)
        {prelude}
        if dist.get_rank() == 0:
            {backward}
"""


@pytest.mark.parametrize(
    "backward",
    [
        "out.sum().backward()",
        "torch.autograd.backward(out.sum())",
        "scaler.scale(torch.nn.functional.mse_loss(out, batch)).backward()",
        "(out * 2 + batch).mean().backward()",
    ],
)
def test_backward_through_the_wrapped_output_is_a_collective(backward: str) -> None:
    source = RANK0_EXTRA.format(group="", prelude="scaler = torch.cuda.amp.GradScaler()", backward=backward)
    assert _codes(source) == [(11, "CC001")]


@pytest.mark.parametrize(
    "prelude, backward",
    [
        ("plain = net(batch)", "plain.sum().backward()"),  # the unwrapped module
        ("plain = model.module(batch)", "plain.sum().backward()"),
        ("pass", "with model.no_sync():\n                out.sum().backward()"),
        ("loss = out.sum()", "print(float(loss))"),  # no backward at all
    ],
)
def test_local_backwards_are_quiet(prelude: str, backward: str) -> None:
    assert _codes(RANK0_EXTRA.format(group="", prelude=prelude, backward=backward)) == []


def test_the_reduction_is_on_the_wrappers_group() -> None:
    """Only the members of the DDP's group reduce: a backward every member runs is quiet, which
    it would not be on the world group."""
    source = """
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def step(net, batch):
            pair = dist.new_group([0, 1])
            model = DDP(net, process_group=pair)
            out = model(batch)
            if dist.get_rank() < 2:
                out.sum().backward()
    """
    assert [code for _, code in _codes(source)] == []
    assert [code for _, code in _codes(source.replace(", process_group=pair", ""))] == ["CC001"]


def test_a_helper_handed_the_loss_runs_its_backward() -> None:
    source = """
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def apply(loss):
            loss.backward()

        def step(model: DDP, batch):
            loss = model(batch).mean()
            if dist.get_rank() == 0:
                apply(loss)
    """
    assert [code for _, code in _codes(source)] == ["CC001"]


def test_accelerate_backward_and_its_no_sync() -> None:
    source = """
        import torch.distributed as dist
        from accelerate import Accelerator

        def step(net, batch):
            accelerator = Accelerator()
            model = accelerator.prepare(net)
            loss = model(batch).mean()
            if dist.get_rank() == 0:
                {backward}
    """
    assert [c for _, c in _codes(source.format(backward="accelerator.backward(loss)"))] == ["CC001"]
    paused = "with accelerator.no_sync(model):\n                    accelerator.backward(loss)"
    assert _codes(source.format(backward=paused)) == []


def test_deepspeed_engine_output_backward() -> None:
    source = """
        import deepspeed
        import torch.distributed as dist

        def step(net, batch, config):
            engine, *_ = deepspeed.initialize(model=net, config=config)
            loss = engine(batch).mean()
            if dist.get_rank() == 0:
                loss.backward()
    """
    assert [code for _, code in _codes(source)] == ["CC001"]


def test_join_shadows_the_backward_of_ranks_whose_inputs_ran_out() -> None:
    source = """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def train(net, batch):
            model = DDP(net)
            steps = 3 + dist.get_rank()
            {head}
                for _ in range(steps):
                    model(batch).sum().backward()
    """
    assert _codes(source.format(head="with model.join():")) == []
    assert [c for _, c in _codes(source.format(head="if True:"))] == ["CC002"]
