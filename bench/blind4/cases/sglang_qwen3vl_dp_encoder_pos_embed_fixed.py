"""
Source: https://github.com/sgl-project/sglang/pull/18827
Project: sglang (Ascend NPU, --attention-backend ascend, --mm-enable-dp-encoder --enable-dp-attention)
Reported: 2026-02
Backend: HCCL
Hang: With the multimodal DP encoder, images of a batch are spread over the attention-TP ranks and a
rank that received no image skips the vision tower entirely and goes straight to the attention-TP
all_gather. The vision tower's position embedding is a VocabParallelEmbedding that still shards over
the TP group and all-reduces inside its forward, so the ranks that do have images block in that
all_reduce while the image-less ranks sit in the all_gather: different collectives, hang.
Fix: build the vision position embedding without tensor parallelism when the DP encoder is on
(enable_tp=not use_data_parallel), so the vision tower issues no TP collective. (#18827 itself was
closed; this is the change merged for the same bug in sglang PRs #19132/#20759.)
"""
from typing import List, Optional

import torch
import torch.nn as nn
import torch_npu  # noqa: F401

from sglang.srt.distributed import tensor_model_parallel_all_reduce
from sglang.srt.layers.dp_attention import (
    get_attention_tp_group,
    get_attention_tp_rank,
    get_attention_tp_size,
)
from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding


class Qwen3VLMoeVisionModel(nn.Module):
    def __init__(self, vision_config, quant_config=None, prefix: str = "",
                 use_data_parallel: bool = False):
        super().__init__()
        self.hidden_size = vision_config.hidden_size
        self.num_position_embeddings = vision_config.num_position_embeddings
        self.use_data_parallel = use_data_parallel
        # with the DP encoder every rank holds the full table: no TP collective inside
        self.pos_embed = VocabParallelEmbedding(
            self.num_position_embeddings,
            self.hidden_size,
            quant_config=quant_config,
            prefix=f"{prefix}.pos_embed",
            enable_tp=not use_data_parallel,
        )
        self.blocks = nn.ModuleList()
        self.out_hidden_size = vision_config.out_hidden_size

    def fast_pos_embed_interpolate(self, grid_thw: torch.Tensor) -> torch.Tensor:
        idx = self._bilinear_indices(grid_thw)
        return self.pos_embed(idx)

    def _bilinear_indices(self, grid_thw: torch.Tensor) -> torch.Tensor:
        n = int(grid_thw.prod(-1).sum().item())
        return torch.arange(n, device=grid_thw.device) % self.num_position_embeddings

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        hidden = pixel_values.new_zeros(pixel_values.shape[0], self.hidden_size)
        hidden = hidden + self.fast_pos_embed_interpolate(grid_thw)
        for blk in self.blocks:
            hidden = blk(hidden)
        return hidden


def _assign_images_to_ranks(patches_per_image: List[int], tp_size: int) -> List[List[int]]:
    buckets: List[List[int]] = [[] for _ in range(tp_size)]
    load = [0] * tp_size
    for i in sorted(range(len(patches_per_image)), key=lambda k: -patches_per_image[k]):
        r = load.index(min(load))
        buckets[r].append(i)
        load[r] += patches_per_image[i]
    return buckets


def run_dp_sharded_mrope_vision_model(vision_model: Qwen3VLMoeVisionModel,
                                      pixel_values: torch.Tensor,
                                      grid_thw_list: List[List[int]],
                                      rope_type: str = "rope_3d") -> torch.Tensor:
    tp_size = get_attention_tp_size()
    tp_rank = get_attention_tp_rank()
    patches = [t * h * w for t, h, w in grid_thw_list]
    buckets = _assign_images_to_ranks(patches, tp_size)
    offsets = [0]
    for p in patches:
        offsets.append(offsets[-1] + p)
    mine = buckets[tp_rank]
    if mine:
        pixel_values_local = torch.cat(
            [pixel_values[offsets[i]:offsets[i + 1]] for i in mine])
    else:
        pixel_values_local = pixel_values[:0]

    if pixel_values_local.shape[0] > 0:
        local_grid = torch.tensor([grid_thw_list[i] for i in mine])
        embeds_local = vision_model(pixel_values_local, local_grid)
    else:
        # ranks that got no image never enter the vision tower
        embeds_local = pixel_values.new_empty((0, vision_model.out_hidden_size))

    max_len = max(sum(patches[i] for i in b) for b in buckets)
    padded = embeds_local.new_zeros((max_len, embeds_local.shape[-1]))
    padded[: embeds_local.shape[0]] = embeds_local
    gathered = get_attention_tp_group().all_gather(padded, dim=0)
    return gathered
