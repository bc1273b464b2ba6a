"""
Source: https://github.com/EleutherAI/bergson/pull/376
Project: EleutherAI bergson (MAGIC trainer with FSDP)
Reported: 2026-08
Backend: NCCL
Hang: When the trainer saves a step checkpoint it exports Adam second moments with
`save_second_moments_as_optimizer_pt`, but the call was gated on `global_rank == 0`. Under FSDP the
moments are sharded DTensors, and the export turns each into a full tensor, an all-gather over the
whole mesh. Rank 0 enters the all-gathers alone while the other ranks go on to the DCP save and
the next training step, so the run hangs at the first checkpoint.
Fix: Call the export from every rank; the function itself already restricts the file write to
rank 0.
"""
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def _maybe_full(t):
    # DTensor -> full tensor is a collective (all-gather over the device mesh).
    return t.full_tensor() if isinstance(t, DTensor) else t


def save_second_moments_as_optimizer_pt(model, opt_state, path, step=None, betas=None, eps=None):
    """Export torchopt AdamW `nu` into a torch `optimizer.pt`; file written by rank 0 only."""
    names = [n for n, _ in model.named_parameters()]
    state = {}
    for idx, (name, nu) in enumerate(zip(names, opt_state.nu)):
        full = _maybe_full(nu).detach().cpu()
        state[idx] = {"exp_avg_sq": full, "param_name": name}
    if not dist.is_initialized() or dist.get_rank() == 0:
        group = {"params": list(range(len(names)))}
        if betas is not None:
            group["betas"] = betas
        if eps is not None:
            group["eps"] = eps
        torch.save({"state": state, "param_groups": [group], "step": step}, str(path))
    return len(state)


class MagicTrainer:
    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg
        self.global_rank = dist.get_rank() if dist.is_initialized() else 0

    def _checkpoint(self, state, i, save_dir, optimizer_cfg):
        p = os.path.join(save_dir, f"step_{i}.ckpt")
        if optimizer_cfg is not None:
            os.makedirs(p, exist_ok=True)
            save_second_moments_as_optimizer_pt(
                self.model, state.opt_state, os.path.join(p, "optimizer.pt"), step=i, **optimizer_cfg
            )
        return state.save(p)  # DCP save, collective on all ranks

    def run(self, state, data, save_dir, save_every, optimizer_cfg=None):
        pending = None
        for i in range(len(data)):
            if i % save_every == 0:
                if pending is not None:
                    pending.result()
                pending = self._checkpoint(state, i, save_dir, optimizer_cfg)
            state = self.step(state, data[i])
        return state

    def step(self, state, batch):
        loss = self.model(**batch).loss
        loss.backward()  # FSDP reduce-scatter of gradients
        state.apply_update()
        return state
