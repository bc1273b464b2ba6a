"""
Source: https://github.com/pytorch/torchtitan/pull/4777
Project: torchtitan
Reported: 2026-09
Backend: NCCL
Hang: In the Qwen3.5 multimodal model the vision encoder is wrapped with FSDP like the decoder blocks.
_prepare_multimodal_embeds() only calls the vision encoder when the local batch carries pixel_values. With
mixed image/text data a DP rank whose micro-batch has no images skips the vision forward (and backward), so it
never issues the vision blocks' FSDP all-gathers / reduce-scatters while ranks that got images do; the FSDP
collectives of the DP group go out of step and training hangs.
Fix: When the model has a vision encoder, always run it: ranks without images push a tiny dummy image through
the encoder and add it with zero weight, so every rank takes part in the same FSDP collectives.
"""
import torch
import torch.nn as nn

from torchtitan.protocols.model import ModelProtocol


class Qwen35VisionEncoder(nn.Module):
    def __init__(self, patch_dim, hidden, out_dim, depth=4):
        super().__init__()
        self.patch_embed = nn.Linear(patch_dim, hidden)
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(hidden, 8, batch_first=True) for _ in range(depth)])
        self.merger = nn.Linear(hidden, out_dim)
        self.patch_dim = patch_dim

    def forward(self, pixel_values, grid_thw):
        x = self.patch_embed(pixel_values).unsqueeze(0)
        for block in self.blocks:  # each block is fully_shard()-ed: all-gather on entry
            x = block(x)
        return self.merger(x.squeeze(0))


class Qwen35Model(nn.Module, ModelProtocol):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.image_token_id = config.image_token_id
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.vision_encoder = (Qwen35VisionEncoder(config.patch_dim, config.vision_dim, config.dim)
                               if config.has_vision else None)
        self.layers = nn.ModuleDict({str(i): nn.Linear(config.dim, config.dim) for i in range(config.n_layers)})
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)

    def _prepare_multimodal_embeds(self, tokens, pixel_values=None, grid_thw=None):
        inputs_embeds = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        if pixel_values is not None and grid_thw is not None:  # DIVERGES
            image_embeds = self.vision_encoder(pixel_values, grid_thw)
            mask = (tokens == self.image_token_id).unsqueeze(-1)
            inputs_embeds = inputs_embeds.masked_scatter(mask, image_embeds.to(inputs_embeds.dtype))
        return inputs_embeds

    def forward(self, tokens, pixel_values=None, grid_thw=None):
        h = self._prepare_multimodal_embeds(tokens, pixel_values, grid_thw)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(h)
