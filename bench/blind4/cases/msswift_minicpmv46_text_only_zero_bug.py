"""
Source: https://github.com/modelscope/ms-swift/pull/9639
Project: ms-swift (MiniCPM-V 4.6 template, DeepSpeed ZeRO training)
Reported: 2026-06
Backend: NCCL
Hang: With DeepSpeed ZeRO-3 the vision tower and merger parameters are sharded and all-gathered on
demand when a module's forward runs. For a text-only sample the template's embedding step skips the
vision encoder entirely (no pixel_values / pixel_values_videos), so a rank holding a text-only batch
never issues the vision-parameter all-gathers that a rank holding an image batch issues in the same
step. The image rank blocks in the ZeRO all-gather for the vision tower while the text-only rank is
already in the language model's gathers: the job hangs on datasets that mix pure text with images.
Fix: under DeepSpeed, run a minimal dummy image through vision_tower and merger for text-only samples
and add `image_embeds.mean() * 0.` to the text embeddings, so every rank touches the same modules.
"""
from typing import Any, Dict

import torch
from swift.llm.template.base import Template
from swift.llm.template.register import register_template
from swift.utils import is_deepspeed_enabled


class MiniCPMV4_6Template(Template):
    placeholder_tokens = ["<unk>"]

    def _encode_vision(self, model, pixel_values, tgt_sizes):
        vision_out = model.vision_tower(pixel_values, tgt_sizes=tgt_sizes)  # ZeRO-3 gathers here
        return model.merger(vision_out, tgt_sizes=tgt_sizes)

    def _post_encode(self, model, inputs: Dict[str, Any]) -> Dict[str, Any]:
        input_ids = inputs["input_ids"]
        embed_tokens = model.get_input_embeddings()
        inputs_embeds = embed_tokens(input_ids)

        pixel_values = inputs.get("pixel_values")
        pixel_values_videos = inputs.get("pixel_values_videos")
        if pixel_values is not None or pixel_values_videos is not None:  # DIVERGES
            pv = pixel_values if pixel_values is not None else pixel_values_videos
            tgt = inputs.get("tgt_sizes") if pixel_values is not None else inputs.get("video_tgt_sizes")
            image_embeds = self._encode_vision(model, pv.to(inputs_embeds.dtype), tgt)
            image_mask = inputs["image_bound_mask"].unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds.to(inputs_embeds.dtype))
        # text-only samples: the vision encoder is never called on this rank

        return {"inputs_embeds": inputs_embeds}


register_template("minicpmv4_6", MiniCPMV4_6Template)
