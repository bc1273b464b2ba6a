"""
Source: https://github.com/QwenLM/Qwen3-VL/issues/126
Project: QwenLM/Qwen3-VL (issue filed 2024 against Qwen2-VL fine-tuning; same pattern reported for Qwen2.5-VL)
Reported: 2024-09 (workaround posted 2025-03)
Backend: NCCL (DeepSpeed ZeRO-3 parameter all-gathers)
Hang: under ZeRO-3 every call of a partitioned submodule all-gathers that submodule's parameters in its forward
pre-hook (and reduce-scatters the grads in backward). The Qwen-VL forward calls self.visual once per modality
present in the local micro-batch: 0 times for a text-only batch, once for images, twice when the batch holds both
images and videos. Different ranks get different mixes, so they issue different numbers of visual-tower
all-gathers and the job hangs (sometimes after DeepSpeed prints "Invalidate trace cache @ step N: expected module
2, but got module 1"). ZeRO-2 or per-device batch 1 of a single modality does not hang.
Fix (workaround given in the thread, used in VLM-R1's Qwen2.5-VL patch): all_reduce whether any rank has visual
input in this step; a rank without images then runs a tiny dummy image through self.visual (and adds 0 * its
output) so every rank makes the same visual-tower calls.
"""
import torch
import torch.distributed as dist
from torch import nn


class QwenVLForConditionalGeneration(nn.Module):
    def forward(self, input_ids, pixel_values=None, image_grid_thw=None,
                pixel_values_videos=None, video_grid_thw=None, labels=None):
        inputs_embeds = self.model.embed_tokens(input_ids)
        if pixel_values is not None:
            # ZeRO-3 pre-forward hook all-gathers the visual tower's partitioned params here
            image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw)  # DIVERGES  (called only on ranks whose micro-batch has images)
            image_mask = input_ids == self.config.image_token_id
            inputs_embeds = inputs_embeds.masked_scatter(image_mask.unsqueeze(-1), image_embeds)
        if pixel_values_videos is not None:
            video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw)  # DIVERGES  (second visual call only on ranks with videos)
            video_mask = input_ids == self.config.video_token_id
            inputs_embeds = inputs_embeds.masked_scatter(video_mask.unsqueeze(-1), video_embeds)
        outputs = self.model(inputs_embeds=inputs_embeds)
        logits = self.lm_head(outputs.last_hidden_state)
        return self.loss_function(logits, labels)
