"""
Source: https://github.com/modelscope/ms-swift/issues/10183
Project: ms-swift (MiniCPM-o 4.5 LoRA fine-tuning under DDP)
Reported: 2026-09
Backend: NCCL
Hang: MiniCPM's resampler keeps a non-persistent position-embedding cache buffer and
grows it on each rank when an image/video larger than the cached size arrives. DDP
(broadcast_buffers=True) broadcasts all module buffers from rank 0 at the start of every
forward. After rank 2 saw a large video frame its cache buffer holds 24,084,544 floats
while ranks 0, 1, 3 still hold 64, so the same buffer broadcast has per-rank sizes and
the collective never completes (same op, same sequence number, different counts).
Fix: declare resampler.pos_embed as a DDP-ignored buffer in the MiniCPM model loader
(_ddp_params_and_buffers_to_ignore) so only the statically shaped buffers are
broadcast (fix from ms-swift PR #10187).
"""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from swift.model.register import ModelLoader


def get_2d_sincos_pos_embed(embed_dim: int, grid_hw) -> torch.Tensor:
    h, w = grid_hw
    return torch.zeros(h, w, embed_dim)


class Resampler(nn.Module):
    def __init__(self, num_queries: int, embed_dim: int, max_size=(70, 70)):
        super().__init__()
        self.num_queries = num_queries
        self.embed_dim = embed_dim
        self.max_size = list(max_size)
        self.query = nn.Parameter(torch.zeros(num_queries, embed_dim))
        self.attn = nn.MultiheadAttention(embed_dim, 8, batch_first=True)
        self._set_2d_pos_cache(self.max_size)

    def _set_2d_pos_cache(self, max_size, device="cpu"):
        pos_embed = get_2d_sincos_pos_embed(self.embed_dim, max_size).to(device)
        self.register_buffer("pos_embed", pos_embed, persistent=False)

    def _adjust_pos_cache(self, tgt_sizes: torch.Tensor, device):
        # grows this rank's cache only when this rank's batch has a bigger image
        max_h = int(tgt_sizes[:, 0].max())
        max_w = int(tgt_sizes[:, 1].max())
        if max_h > self.max_size[0] or max_w > self.max_size[1]:
            self.max_size = [max(max_h, self.max_size[0]), max(max_w, self.max_size[1])]
            self._set_2d_pos_cache(self.max_size, device)

    def forward(self, x: torch.Tensor, tgt_sizes: torch.Tensor) -> torch.Tensor:
        self._adjust_pos_cache(tgt_sizes, x.device)
        q = self.query.unsqueeze(0).expand(x.shape[0], -1, -1)
        out, _ = self.attn(q, x, x)
        return out


class MiniCPMOLoader(ModelLoader):
    def get_model(self, model_dir: str, config, model_kwargs) -> nn.Module:
        model = super().get_model(model_dir, config, model_kwargs)
        return model


def wrap_for_training(model: nn.Module, local_rank: int) -> DDP:
    # DDP broadcasts every registered buffer (including resampler.pos_embed) from rank 0
    # in _sync_buffers() before each forward
    return DDP(model, device_ids=[local_rank], broadcast_buffers=True)  # DIVERGES
