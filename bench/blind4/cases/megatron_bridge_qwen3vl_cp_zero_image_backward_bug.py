"""
Source: https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4784
Project: Megatron-Bridge (Qwen3-VL, context parallel with vision_dp_when_cp=True)
Reported: 2026-07
Backend: NCCL
Hang: With vision_dp_when_cp the images are split over CP ranks, each rank encodes its share and the
embeddings are all-gathered by a custom autograd Function whose backward all-reduces the gradient over
the CP group. A CP rank that received no image builds a plain zeros placeholder that does not require
grad, so autograd never records the Function on that rank and its backward (with the all_reduce) is
never run there; the ranks that encoded images wait forever in the backward all_reduce. A fully frozen
vision tower has the same effect.
Fix: when grad is enabled, make every tensor entering AllGatherVisionEmbeddings require grad so every
CP rank runs its backward and joins the cp_group all_reduce (placeholder dtype follows params_dtype).
"""
import torch
import torch.distributed as dist
from megatron.core.transformer.module import MegatronModule


class AllGatherVisionEmbeddings(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local_embeds, seqlen_on_cp_ranks, cp_group):
        ctx.cp_group = cp_group
        ctx.cp_rank = dist.get_rank(group=cp_group)
        ctx.save_for_backward(seqlen_on_cp_ranks)
        max_len = int(seqlen_on_cp_ranks.max().item())
        padded = local_embeds.new_zeros((max_len, local_embeds.shape[-1]))
        padded[: local_embeds.shape[0]] = local_embeds
        bufs = [torch.empty_like(padded) for _ in range(dist.get_world_size(group=cp_group))]
        dist.all_gather(bufs, padded, group=cp_group)
        return torch.cat([b[: int(n)] for b, n in zip(bufs, seqlen_on_cp_ranks.tolist())], dim=0)

    @staticmethod
    def backward(ctx, grad_output):
        (seqlens,) = ctx.saved_tensors
        grad_output = grad_output.contiguous()
        # each rank only holds gradient rows for its own LLM sequence shard: sum over CP first
        dist.all_reduce(grad_output, group=ctx.cp_group)
        start = int(seqlens[: ctx.cp_rank].sum().item())
        end = start + int(seqlens[ctx.cp_rank].item())
        return grad_output[start:end], None, None


class Qwen3VLModel(MegatronModule):
    def __init__(self, config, vision_model, language_model, pg_collection):
        super().__init__(config=config)
        self.vision_model = vision_model
        self.language_model = language_model
        self.pg_collection = pg_collection

    def _encode_images(self, vision_data, vision_grid_thw, seqlen_on_cp_ranks):
        cp_size = self.pg_collection.cp.size()
        hidden = self.language_model.config.hidden_size
        if vision_data.shape[0] > 0:
            vision_embeds, deepstack = self.vision_model(hidden_states=vision_data,
                                                         grid_thw=vision_grid_thw)
        else:
            # CP rank without images: placeholder carries no autograd history
            vision_embeds = torch.zeros((0, hidden), device=vision_data.device,
                                        dtype=torch.bfloat16)  # DIVERGES
            deepstack = [torch.zeros((0, hidden), device=vision_data.device, dtype=torch.bfloat16)
                         for _ in self.vision_model.config.deepstack_visual_indexes]
        if cp_size > 1 and self.config.vision_dp_when_cp:
            vision_embeds = AllGatherVisionEmbeddings.apply(
                vision_embeds, seqlen_on_cp_ranks, self.pg_collection.cp)
            deepstack = [AllGatherVisionEmbeddings.apply(d, seqlen_on_cp_ranks, self.pg_collection.cp)
                         for d in deepstack]
        return vision_embeds, deepstack

    def forward(self, input_ids, vision_data, vision_grid_thw, vision_mask, seqlen_on_cp_ranks,
                labels=None):
        vision_embeds, deepstack = self._encode_images(vision_data, vision_grid_thw,
                                                       seqlen_on_cp_ranks)
        emb = self.language_model.embedding(input_ids=input_ids, position_ids=None).clone()
        emb = emb.transpose(0, 1).contiguous()
        emb[vision_mask] = vision_embeds
        emb = emb.transpose(0, 1).contiguous()
        return self.language_model(input_ids=input_ids, position_ids=None, attention_mask=None,
                                   decoder_input=emb, labels=labels,
                                   visual_pos_masks=vision_mask, deepstack_visual_embeds=deepstack)
