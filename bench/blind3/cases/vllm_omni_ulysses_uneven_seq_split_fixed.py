"""
Source: https://github.com/vllm-project/vllm-omni/issues/492
Project: vllm-omni (diffusion, Qwen-Image with Ulysses sequence parallelism; reported on Ascend A3)
Reported: 2025-12
Backend: HCCL
Hang: The image token sequence is split across the Ulysses group with torch.chunk. For 1328x1328 the
sequence (83*83 = 6889 image tokens) is not divisible by ulysses_degree=4, so the last rank holds a shorter
shard. Each rank then calls all_to_all_single with equal splits derived from its own local length, so the
ranks enter the all-to-all with different tensor sizes: a mismatched collective (the report shows it failing;
on other backends/sizes it hangs or exchanges wrong rows).
Fix: Pad the sequence to a multiple of the Ulysses degree before splitting (all ranks then exchange equal-size
shards) and strip the padding after the output all-gather.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from vllm_omni.diffusion.distributed.parallel_state import get_sp_group


def _all_to_all_seq_to_head(x: torch.Tensor, group) -> torch.Tensor:
    # x: [b, s_local, h, d] -> [b, s_local * P, h / P, d]
    world = dist.get_world_size(group)
    b, s, h, d = x.shape
    x = x.reshape(b, s, world, h // world, d).permute(2, 1, 0, 3, 4).contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out.reshape(world * s, b, h // world, d).transpose(0, 1)


def _all_to_all_head_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    world = dist.get_world_size(group)
    b, s_full, h_local, d = x.shape
    s = s_full // world
    x = x.reshape(b, world, s, h_local, d).permute(1, 3, 0, 2, 4).contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out.permute(2, 3, 0, 1, 4).reshape(b, s, world * h_local, d)


class UlyssesJointAttention(torch.nn.Module):
    def __init__(self, inner_attn):
        super().__init__()
        self.inner_attn = inner_attn
        self.sp = get_sp_group()

    def forward(self, q, k, v):
        group = self.sp.device_group
        q, k, v = (_all_to_all_seq_to_head(t, group) for t in (q, k, v))
        out = self.inner_attn(q, k, v)
        return _all_to_all_head_to_seq(out, group)


class QwenImageTransformer2DModel(torch.nn.Module):
    def __init__(self, blocks, proj_out):
        super().__init__()
        self.blocks = blocks
        self.proj_out = proj_out
        self.sp = get_sp_group()

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states, temb):
        sp_size, sp_rank = self.sp.world_size, self.sp.rank_in_group
        seq_len = hidden_states.shape[1]
        pad = (-seq_len) % sp_size
        if pad:
            # pad so every rank holds an equally sized shard (same all-to-all sizes on all ranks)
            hidden_states = torch.nn.functional.pad(hidden_states, (0, 0, 0, pad))
        hidden_states = torch.chunk(hidden_states, sp_size, dim=1)[sp_rank]
        for block in self.blocks:
            encoder_hidden_states, hidden_states = block(hidden_states, encoder_hidden_states, temb)
        out = self.proj_out(hidden_states)
        out = self.sp.all_gather(out.contiguous(), dim=1)
        return out[:, :seq_len]
