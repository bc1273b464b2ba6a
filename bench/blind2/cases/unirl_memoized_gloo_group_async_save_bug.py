"""
Source: https://github.com/Tencent-Hunyuan/UniRL/pull/410
Project: UniRL (Tencent-Hunyuan)
Reported: 2026-09
Backend: gloo (side group) + NCCL (default group)
Hang: init_gloo_group() memoizes one process-wide gloo group. BaseFSDP2Backend._save_dcp passes that
group to dcp.async_save(), whose background thread keeps issuing collectives on it for the lifetime of
the save. The PR pointed the per-embed monitored_barrier (text-encoder onload path) at the same memoized
group, so the main thread's barrier and the save thread drive one group concurrently; ranks interleave
the two streams differently and the group errors out or wedges.
Fix: The per-embed barrier builds and uses its own dedicated gloo group via dist.new_group(backend="gloo").
"""
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

_GLOO_GROUP = None


def init_gloo_group():
    """Return a process-wide gloo group (created once, then memoized)."""
    global _GLOO_GROUP
    if _GLOO_GROUP is None:
        _GLOO_GROUP = dist.new_group(backend="gloo")
    return _GLOO_GROUP


class BaseFSDP2Backend:
    def __init__(self, cfg, model, optimizer):
        self.cfg = cfg
        self.model = model
        self.optimizer = optimizer
        self._save_future = None

    def _save_dcp(self, path: str) -> None:
        if self._save_future is not None:
            self._save_future.result()
        state = {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}
        pg = init_gloo_group()
        if self.cfg.checkpoint_async:
            # background thread owns `pg` until the future resolves
            self._save_future = dcp.async_save(state, checkpoint_id=path, process_group=pg)
        else:
            dcp.save(state, checkpoint_id=path, process_group=pg)


class TextEncoderOnloader:
    """Moves the text encoder onto the device for embedding, one rank group at a time."""

    def __init__(self, cfg, text_encoder):
        self.cfg = cfg
        self.text_encoder = text_encoder
        self._barrier_group = init_gloo_group()  # DIVERGES: same memoized group as the async DCP save

    def _barrier(self) -> None:
        dist.monitored_barrier(group=self._barrier_group, timeout=timedelta(seconds=self.cfg.embed_barrier_timeout_s))

    @torch.no_grad()
    def embed(self, prompts):
        self.text_encoder.to("cuda")
        out = self.text_encoder(prompts)
        self.text_encoder.to("cpu")
        self._barrier()
        return out


def train_loop(cfg, backend: BaseFSDP2Backend, onloader: TextEncoderOnloader, loader, step_fn):
    for step, batch in enumerate(loader):
        if cfg.text_encoder_onload_for_embed:
            batch["embeds"] = onloader.embed(batch["prompts"])
        step_fn(batch)
        if cfg.checkpoint_format == "dcp" and step % cfg.save_every == 0:
            backend._save_dcp(f"{cfg.out_dir}/step_{step}")
