"""
Source: https://github.com/vllm-project/vllm/issues/50158
Project: vLLM (V1 spec decode, EAGLE/EAGLE3 proposer load path)
Reported: 2026-07
Backend: NCCL
Hang: Not a hang but a silent per-rank divergence: while loading the drafter, each TP rank decides
whether the EAGLE embed_tokens (and lm_head) equal the target's by comparing only its own vocab shard.
With TP=2 rank 0 found its shard distinct and kept the drafter embedding, rank 1 found its shard
identical and tied the target's embedding, so the TP ranks run different drafters whose vocab-parallel
embedding all-reduce sums shards of two different tables; acceptance collapses.
Fix: Reduce each rank's "shards are equal" verdict with MIN over the TP CPU group and share the module
only if every rank agrees (PR #50280).
"""
import torch
import torch.distributed as dist
from vllm.distributed.parallel_state import get_pp_group, get_tp_group
from vllm.logger import init_logger

logger = init_logger(__name__)


class SpecDecodeBaseProposer:
    def __init__(self, vllm_config, device, runner=None):
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
        self.model = None

    def _get_model(self, target_model):
        return getattr(target_model, "language_model", target_model)

    def _local_weights_equal(self, a: torch.nn.Module, b: torch.nn.Module) -> bool:
        # compares this rank's shard only
        return a.weight.shape == b.weight.shape and torch.equal(a.weight, b.weight)

    def _maybe_share_embeddings(self, target_model) -> None:
        if get_pp_group().world_size != 1:
            return
        target = self._get_model(target_model)
        target_embed = target.model.embed_tokens
        draft_embed = self.model.model.embed_tokens
        share = self._local_weights_equal(target_embed, draft_embed)
        if share:  # DIVERGES: verdict computed from this rank's vocab shard only
            logger.info("Detected EAGLE model with embed_tokens identical to the target model. Sharing.")
            del self.model.model.embed_tokens
            self.model.model.embed_tokens = target_embed
        else:
            logger.info("Detected EAGLE model with distinct embed_tokens weights. Keeping separate weights.")

    def _maybe_share_lm_head(self, target_model) -> None:
        target = self._get_model(target_model)
        if not hasattr(self.model, "lm_head"):
            self.model.lm_head = target.lm_head
            return
        share = self._local_weights_equal(target.lm_head, self.model.lm_head)
        if share:
            del self.model.lm_head
            self.model.lm_head = target.lm_head

    def load_model(self, target_model, draft_model_loader) -> None:
        self.model = draft_model_loader(self.vllm_config)
        self._maybe_share_embeddings(target_model)
        self._maybe_share_lm_head(target_model)
