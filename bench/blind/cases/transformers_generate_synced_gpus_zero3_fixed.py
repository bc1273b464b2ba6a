"""
Source: https://github.com/huggingface/transformers/pull/22242
Project: HF transformers (generate) with DeepSpeed ZeRO-3
Reported: 2023-03
Backend: NCCL
Hang: Under ZeRO-3 every decoding step's forward all-gathers each layer's parameter shards, so all
ranks must run the same number of forward passes. `generate` stops a rank's loop as soon as its own
sequences hit EOS / max length unless `synced_gpus` is set, and ranks fed different prompts finish
after different numbers of steps. The finished rank leaves the loop while the others block in the
next step's parameter all-gather.
Fix: Default `synced_gpus` to `is_deepspeed_zero3_enabled()` so that, under ZeRO-3, finished ranks
keep running dummy forward passes until an all-reduce says every rank is done.
"""
import torch
import torch.distributed as dist
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled


class GenerationConfig:
    def __init__(self, max_new_tokens=64, eos_token_id=2, pad_token_id=0):
        self.max_new_tokens = max_new_tokens
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id


class GenerationMixin:
    """Greedy decoding loop in the shape of transformers' `_greedy_search`."""

    def _has_unfinished_sequences(self, this_peer_finished, synced_gpus, device):
        if synced_gpus:
            # 0.0 if this peer is done, 1.0 otherwise; stop only when every peer is done.
            flag = torch.tensor(0.0 if this_peer_finished else 1.0, device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.SUM)
            return flag.item() != 0.0
        return not this_peer_finished

    def _greedy_search(self, input_ids, generation_config, synced_gpus):
        unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        this_peer_finished = False
        steps = 0
        while self._has_unfinished_sequences(this_peer_finished, synced_gpus, input_ids.device):
            # ZeRO-3: this forward triggers per-layer parameter all-gathers on every call.
            outputs = self(input_ids=input_ids)
            if synced_gpus and this_peer_finished:
                continue  # dummy step only to keep the collectives aligned
            next_tokens = outputs.logits[:, -1, :].argmax(dim=-1)
            next_tokens = next_tokens * unfinished + generation_config.pad_token_id * (1 - unfinished)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            unfinished = unfinished & (next_tokens != generation_config.eos_token_id).long()
            steps += 1
            if unfinished.max() == 0 or steps >= generation_config.max_new_tokens:
                this_peer_finished = True
        return input_ids

    @torch.no_grad()
    def generate(self, input_ids, generation_config=None, synced_gpus=None, **kwargs):
        generation_config = generation_config or GenerationConfig()
        if synced_gpus is None:
            synced_gpus = is_deepspeed_zero3_enabled() and dist.get_world_size() > 1
        return self._greedy_search(input_ids, generation_config, synced_gpus=synced_gpus)


def evaluate(model, tokenizer, prompts_for_this_rank):
    # Each rank has its own prompts, so each finishes after a different number of steps.
    batch = tokenizer(prompts_for_this_rank, return_tensors="pt", padding=True).to(model.device)
    return model.generate(batch["input_ids"], GenerationConfig(max_new_tokens=128))
