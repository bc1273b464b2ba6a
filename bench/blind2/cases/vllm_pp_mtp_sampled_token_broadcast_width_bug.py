"""
Source: https://github.com/vllm-project/vllm/pull/46994
Project: vLLM (Model Runner V2)
Reported: 2026-09
Backend: NCCL
Hang: With pipeline parallelism and MTP speculative decoding, the last PP stage
broadcasts the sampled token ids to the earlier stages each step. On steps where the
plain sampler ran (prefill, first decode) the last stage broadcasts a [num_reqs, 1]
tensor, but the receiving stages always post a [num_reqs, max_sample_len] buffer
(max_sample_len = num_spec_tokens + 1). NCCL does not negotiate element counts, so the
receive never completes and the PP group hangs until the watchdog fires.
Fix: pad the sampled ids on the last stage to [num_reqs, max_sample_len] with -1 before
broadcasting, so sender and receivers use the same size every step.
"""
import torch

from vllm.distributed.parallel_state import get_pp_group


class PPSampledTokenHandler:
    """Moves sampled token ids from the last PP stage to the other stages."""

    def __init__(self, num_speculative_tokens: int, device: torch.device):
        self.max_sample_len = num_speculative_tokens + 1
        self.device = device
        self.pp_group = get_pp_group()

    @property
    def src_rank(self) -> int:
        return self.pp_group.last_rank

    def broadcast(self, sampled_token_ids: torch.Tensor) -> None:
        # Called on the last PP stage. Width is 1 after a plain sample step and
        # max_sample_len after a rejection-sampling (verify) step.
        self.pp_group.broadcast(sampled_token_ids.contiguous(), src=self.src_rank)  # DIVERGES

    def receive(self, num_reqs: int) -> torch.Tensor:
        # Called on every non-last PP stage.
        buf = torch.empty(num_reqs, self.max_sample_len, dtype=torch.int64, device=self.device)
        self.pp_group.broadcast(buf, src=self.src_rank)
        return buf


class ModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        spec = vllm_config.speculative_config
        self.num_spec_tokens = spec.num_speculative_tokens if spec is not None else 0
        self.pp_handler = PPSampledTokenHandler(self.num_spec_tokens, device)
        self.pp_group = get_pp_group()

    def _sample(self, logits: torch.Tensor, is_verify_step: bool) -> torch.Tensor:
        if is_verify_step:
            return self._rejection_sample(logits)  # [num_reqs, num_spec + 1]
        return logits.argmax(dim=-1, keepdim=True)  # [num_reqs, 1]

    def _rejection_sample(self, logits):
        return logits.argmax(dim=-1).view(-1, self.num_spec_tokens + 1)

    def execute_model(self, batch, is_verify_step: bool):
        hidden = self._forward(batch)
        if self.pp_group.is_last_rank:
            sampled = self._sample(hidden, is_verify_step)
            self.pp_handler.broadcast(sampled)
        else:
            sampled = self.pp_handler.receive(batch.num_reqs)
        return sampled

    def _forward(self, batch):
        return torch.empty(batch.num_tokens, 1024)
