"""
Source: https://github.com/sgl-project/sglang/issues/37059
Project: sglang (MiMo-V2.5, --tp 8 --dp 2 --enable-dp-attention --mm-enable-dp-encoder)
Reported: 2026-08
Backend: NCCL
Hang: Under DP attention the 8 TP ranks form two attention-TP groups of 4, and a request is routed
to one DP group only. The audio encoder's attention weights are sharded over the attention-TP group,
but its output projection reduces over the full 8-rank TP group. When an audio request lands on
DP group 0, its 4 ranks enter the full-TP all-reduce inside the audio encoder while the 4 ranks of
DP group 1 never run the audio encoder and continue with their own attention-TP collectives, so the
server wedges (and with audio on both sides, unrelated batches would be mixed).
Fix: construct the audio encoder's VisionAttention with use_dp_attention_reduce=is_dp_attention_enabled()
so its projection reduces over the attention-TP group (fix PR #37060).
"""
from typing import List, Optional

import torch
import torch.nn as nn

from sglang.srt.layers.attention.vision import VisionAttention
from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem


class AudioEncoderAttention(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__()
        self.attn = VisionAttention(
            embed_dim=config.d_model,
            num_heads=config.encoder_attention_heads,
            projection_size=config.d_model,
            use_qkv_parallel=True,
            quant_config=quant_config,
            prefix=f"{prefix}.attn",
            use_dp_attention_reduce=is_dp_attention_enabled(),
        )

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        return self.attn(hidden_states, cu_seqlens=cu_seqlens)


class AudioEncoderLayer(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__()
        self.self_attn = AudioEncoderAttention(config, quant_config, f"{prefix}.self_attn")
        self.norm = nn.LayerNorm(config.d_model)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        return x + self.self_attn(self.norm(x), cu_seqlens)


class MiMoAudioTokenizerEncoder(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__()
        self.layers = nn.ModuleList(
            AudioEncoderLayer(config, quant_config, f"{prefix}.layers.{i}")
            for i in range(config.encoder_layers)
        )

    def forward(self, feats: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        h = feats
        for layer in self.layers:
            h = layer(h, cu_seqlens)
        return h


class MiMoV2ForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.audio_encoder = MiMoAudioTokenizerEncoder(config.audio_config, quant_config,
                                                       "audio_tokenizer.encoder")

    def get_audio_feature(self, items: List[MultimodalDataItem]) -> torch.Tensor:
        feats = torch.cat([it.feature for it in items], dim=0)
        lens = torch.tensor([0] + [it.feature.shape[0] for it in items]).cumsum(0).int()
        return self.audio_encoder(feats, lens.to(feats.device))

    def embed_multimodal(self, mm_items: List[MultimodalDataItem]) -> Optional[torch.Tensor]:
        # runs per DP-attention rank, only for the requests routed to this DP group
        audio_items = [it for it in mm_items if it.modality == Modality.AUDIO]
        if not audio_items:
            return None
        return self.get_audio_feature(audio_items)
