"""
Source: https://github.com/NVIDIA/Megatron-LM/pull/485
Project: Megatron-LM (megatron.core)
Reported: 2023-09
Backend: NCCL
Hang: With FP8 (Transformer Engine) and pipeline parallelism, TransformerBlock.forward enters
te.fp8_autocast without an fp8_group. Transformer Engine then reduces the amax history over the default (world)
group when the autocast region exits, i.e. across ranks of *all* pipeline stages. Different stages run their
forward microbatches at different points of the 1F1B schedule, interleaved with pipeline send/recv, so a stage
sits in the world-group amax all-reduce while its neighbour is blocked in recv_forward waiting for it; the
pipeline hangs.
Fix: Pass fp8_group=parallel_state.get_amax_reduction_group() (the data/tensor-parallel ranks of the same
pipeline stage) to fp8_autocast, as the non-mcore NeMo transformer already did.
"""
from contextlib import nullcontext

import torch

from megatron.core import parallel_state
from megatron.core.transformer.module import MegatronModule

try:
    import transformer_engine as te
    from transformer_engine.common.recipe import DelayedScaling, Format
except ImportError:  # pragma: no cover
    te = None


class TransformerBlock(MegatronModule):
    def __init__(self, config, layers, post_layer_norm=None):
        super().__init__(config=config)
        self.config = config
        self.layers = torch.nn.ModuleList(layers)
        self.final_layernorm = post_layer_norm

    def _fp8_context(self):
        if not self.config.fp8:
            return nullcontext()
        fp8_format = Format.E4M3 if self.config.fp8 == "e4m3" else Format.HYBRID
        fp8_recipe = DelayedScaling(
            margin=self.config.fp8_margin,
            interval=self.config.fp8_interval,
            fp8_format=fp8_format,
            amax_compute_algo=self.config.fp8_amax_compute_algo,
            amax_history_len=self.config.fp8_amax_history_len,
            override_linear_precision=(False, False, not self.config.fp8_wgrad),
        )
        return te.pytorch.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe)  # DIVERGES

    def forward(self, hidden_states, attention_mask, inference_params=None, rotary_pos_emb=None):
        with self._fp8_context():
            for layer in self.layers:
                hidden_states = layer(hidden_states, attention_mask, inference_params=inference_params,
                                      rotary_pos_emb=rotary_pos_emb)
        if self.final_layernorm is not None:
            hidden_states = self.final_layernorm(hidden_states)
        return hidden_states


def forward_backward_pipelining_without_interleaving(forward_step_func, data_iterator, model, num_microbatches,
                                                     recv_forward, send_forward, recv_backward, send_backward):
    num_warmup = min(parallel_state.get_pipeline_model_parallel_world_size()
                     - parallel_state.get_pipeline_model_parallel_rank() - 1, num_microbatches)
    for _ in range(num_warmup):
        input_tensor = recv_forward()
        output_tensor = forward_step_func(data_iterator, model, input_tensor)  # fp8 amax reduce on exit
        send_forward(output_tensor)
    for _ in range(num_microbatches - num_warmup):
        input_tensor = recv_forward()
        output_tensor = forward_step_func(data_iterator, model, input_tensor)
        send_forward(output_tensor)
        output_grad = recv_backward()
        send_backward(torch.autograd.grad(output_tensor, input_tensor, output_grad))
