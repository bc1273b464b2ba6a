"""
Source: https://github.com/sgl-project/sglang/pull/26759
Project: sglang (Qwen3-VL / Qwen3.5 multimodal serving on Ascend NPU, DP vision encoder)
Reported: 2026-05
Backend: HCCL
Hang: pixel_values are intentionally left on the host for the Qwen3-VL family, and the DP-sharded
vision helper builds its local slice, the empty placeholder for image-less ranks and the padding on
pixel_values.device. Ranks that run the vision tower end up with a device tensor, ranks without an
image keep a CPU tensor, and the group all_gather picks its path from the tensor's device: image ranks
enter the device (HCCL/NCCL) all_gather while image-less ranks enter the CPU shared-memory all_gather,
so the ranks issue different collectives (crash on NPU, latent mismatch/hang on CUDA).
Fix: resolve the vision tower's device once and move this rank's slice and allocate the placeholder
and padding on that device, so every rank takes the same device all_gather.
"""
from typing import List

import torch
import torch_npu  # noqa: F401

from sglang.srt.layers.dp_attention import (
    get_attention_tp_group,
    get_attention_tp_rank,
    get_attention_tp_size,
)
from sglang.srt.multimodal.mm_utils import get_dp_encoder_lb_assignment


class AttentionTPGroupView:
    """Thin view of GroupCoordinator.all_gather's dispatch (shm path for host tensors)."""

    def __init__(self, group):
        self.group = group

    def all_gather(self, input_: torch.Tensor, dim: int = 0) -> torch.Tensor:
        if input_.is_cpu:  # DIVERGES
            return self.group.shm_all_gather(input_, dim=dim)
        return self.group.device_communicator.all_gather(input_, dim)


def run_dp_sharded_mrope_vision_model(vision_model, pixel_values: torch.Tensor,
                                      grid_thw_list: List[List[int]],
                                      rope_type: str = "rope_3d") -> torch.Tensor:
    tp_size = get_attention_tp_size()
    tp_rank = get_attention_tp_rank()
    patches_per_image = [t * h * w for t, h, w in grid_thw_list]
    image_to_rank, counts, grouped_len = get_dp_encoder_lb_assignment(patches_per_image, tp_size)

    cum = [0]
    for p in patches_per_image:
        cum.append(cum[-1] + p)
    start = sum(counts[:tp_rank])
    local_ids = image_to_rank[start:start + counts[tp_rank]]

    # pixel_values may still live on the host here (pre-embed H2D move is skipped)
    if local_ids:
        pixel_values_local = torch.cat([pixel_values[cum[i]:cum[i + 1]] for i in local_ids])
    else:
        pixel_values_local = torch.empty((0, pixel_values.shape[1]),
                                         dtype=pixel_values.dtype, device=pixel_values.device)

    merge = vision_model.spatial_merge_size ** 2
    hidden = vision_model.out_hidden_size
    if pixel_values_local.shape[0] > 0:
        local_grid = [grid_thw_list[i] for i in local_ids]
        # the vision tower moves its input to the NPU internally
        embeds_local = vision_model(pixel_values_local, grid_thw=local_grid)
    else:
        embeds_local = torch.empty((0, hidden), dtype=vision_model.dtype,
                                   device=pixel_values.device)  # DIVERGES

    max_len = max(grouped_len) // merge
    cur = embeds_local.shape[0]
    if cur < max_len:
        pad = torch.zeros((max_len - cur, hidden), dtype=embeds_local.dtype,
                          device=embeds_local.device)
        embeds_local = torch.cat([embeds_local, pad], dim=0)

    group = AttentionTPGroupView(get_attention_tp_group())
    gathered = group.all_gather(embeds_local, dim=0)
    out = []
    for r in range(tp_size):
        n = sum(patches_per_image[i] for i in image_to_rank[sum(counts[:r]):sum(counts[:r + 1])]) // merge
        out.append(gathered[r * max_len: r * max_len + n])
    return torch.cat(out, dim=0)
