"""
Source: https://github.com/bo-ke/llm-internal-medicine/pull/45
Project: llm-internal-medicine (training-health monitor hooked into Megatron-style PP training)
Reported: 2026-08
Backend: NCCL
Hang: The monitor collects per-layer statistics on every rank and periodically calls
gather_and_aggregate(), whose gather function wraps the world-wide all_gather_object.
gather_and_aggregate returned early when the local metric dict was empty. With PP=4 a
pipeline stage can hold no monitored layer (only padding "empty" layers plus the LM
head), so that rank skips the all_gather_object while every other rank blocks in it;
the job hung with all GPUs busy and no error.
Fix: drop the early return so every rank that reaches gather_and_aggregate enters the
gather (an empty dict is a valid contribution).
"""
import json
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist


def default_gather_fn(obj) -> Optional[List[dict]]:
    if not (dist.is_available() and dist.is_initialized()):
        return None
    out: List[Optional[dict]] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


class LayerStatsMonitor:
    def __init__(self, model: torch.nn.Module, out_path: str, interval: int = 50,
                 gather_fn: Optional[Callable] = default_gather_fn):
        self.out_path = out_path
        self.interval = interval
        self._gather_fn = gather_fn
        self._local: Dict[str, Dict[str, float]] = {}
        self._hooks = []
        for name, module in model.named_modules():
            if self._is_monitored(name, module):
                self._hooks.append(module.register_forward_hook(self._make_hook(name)))

    @staticmethod
    def _is_monitored(name: str, module: torch.nn.Module) -> bool:
        # transformer blocks only; PP padding layers and the LM head are not monitored
        return name.endswith(".self_attention") or name.endswith(".mlp")

    def _make_hook(self, name: str):
        def hook(_module, _inputs, output):
            t = output[0] if isinstance(output, tuple) else output
            self._local[name] = {"rms": float(t.float().pow(2).mean().sqrt()),
                                 "max": float(t.abs().max())}
        return hook

    def gather_and_aggregate(self) -> Dict[str, Dict[str, float]]:
        if not self._local:
            return {}  # DIVERGES
        gathered = self._gather_fn(self._local) if self._gather_fn is not None else None
        if gathered is None:
            return dict(self._local)
        merged: Dict[str, Dict[str, float]] = {}
        for part in gathered:
            merged.update(part or {})
        return merged

    def on_step_end(self, step: int) -> None:
        if step % self.interval != 0:
            return
        merged = self.gather_and_aggregate()
        if (not dist.is_initialized() or dist.get_rank() == 0) and merged:
            with open(self.out_path, "a") as f:
                f.write(json.dumps({"step": step, "layers": merged}) + "\n")
        self._local.clear()
