"""
Source: https://github.com/QwenLM/Qwen3-VL/issues/126
Project: QwenLM/Qwen3-VL (issue filed 2024 against Qwen2-VL fine-tuning; same pattern reported for Qwen2.5-VL)
Reported: 2024-09 (workaround posted 2025-03)
Backend: NCCL (DeepSpeed ZeRO-3 parameter all-gathers)
Hang: self.visual (whose ZeRO-3 hooks all-gather its partitioned params) was called 0, 1 or 2 times depending on
the local micro-batch's modalities, so ranks issued different numbers of all-gathers and hung.
Fix (thread workaround): all_reduce per-modality "present" flags so every rank knows whether any rank has images /
videos this step; ranks lacking that modality run a tiny dummy input through self.visual and add 0 * output, so all
ranks make the same sequence of visual-tower calls.
"""
import torch
import torch.distributed as dist
from torch import nn


class QwenVLForConditionalGeneration(nn.Module):
    def _dummy_visual(self, device, dtype):
        patch_dim = self.visual.patch_embed.proj.weight[0].numel()
        grid_thw = torch.tensor([[1, 2, 2]], device=device)
        pixels = torch.zeros(4, patch_dim, device=device, dtype=dtype)
        return self.visual(pixels, grid_thw=grid_thw)

    def forward(self, input_ids, pixel_values=None, image_grid_thw=None,
                pixel_values_videos=None, video_grid_thw=None, labels=None):
        inputs_embeds = self.model.embed_tokens(input_ids)
        flags = torch.tensor(
            [int(pixel_values is not None), int(pixel_values_videos is not None)],
            device=inputs_embeds.device,
        )
        if dist.is_initialized():
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)  # every rank learns what any rank has this step
        any_images, any_videos = bool(flags[0].item()), bool(flags[1].item())

        if any_images:
            if pixel_values is not None:
                image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw)
                image_mask = input_ids == self.config.image_token_id
                inputs_embeds = inputs_embeds.masked_scatter(image_mask.unsqueeze(-1), image_embeds)
            else:
                dummy = self._dummy_visual(inputs_embeds.device, inputs_embeds.dtype)
                inputs_embeds = inputs_embeds + 0.0 * dummy.sum()
        if any_videos:
            if pixel_values_videos is not None:
                video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw)
                video_mask = input_ids == self.config.video_token_id
                inputs_embeds = inputs_embeds.masked_scatter(video_mask.unsqueeze(-1), video_embeds)
            else:
                dummy = self._dummy_visual(inputs_embeds.device, inputs_embeds.dtype)
                inputs_embeds = inputs_embeds + 0.0 * dummy.sum()
        outputs = self.model(inputs_embeds=inputs_embeds)
        logits = self.lm_head(outputs.last_hidden_state)
        return self.loss_function(logits, labels)
