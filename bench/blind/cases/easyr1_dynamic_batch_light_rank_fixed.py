"""
Source: https://github.com/hiyouga/EasyR1/pull/11012
Project: EasyR1 (verl-derived RL trainer, FSDP)
Reported: 2026-09
Backend: NCCL
Hang: With dynamic batching each DP rank computes a micro-batch count from its token total and
all-reduces it with MAX. A "light" rank (few samples, e.g. short text while others got long video
tokens) can receive a synced count larger than its number of samples; it then fails the assertion
(or cannot form that many non-empty partitions) and leaves, while the heavy ranks enter the next
FSDP forward/backward collectives and wait forever.
Fix: Partition at most `local_bsz` real groups and pad the remaining steps with dummy 1-row
micro-batches (zero attention/response mask) so every rank runs the same number of collective
steps; also thread `dp_group` through and use the batch's device for the sync tensor.
"""
import torch
import torch.distributed as dist

from verl import DataProto
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions


def ceildiv(a, b):
    return -(a // -b)


def rearrange_micro_batches(batch, max_token_len, dp_group=None):
    effective_seqlen = batch["attention_mask"].sum(dim=1).tolist()
    total = sum(effective_seqlen)
    num_micro_batches = min(len(effective_seqlen), ceildiv(total, max_token_len))
    device = batch["attention_mask"].device
    if dist.is_initialized():
        t = torch.tensor([num_micro_batches], dtype=torch.long, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dp_group)
        num_micro_batches = int(t.item())
    # Form at most local_bsz real groups; pad the rest with empty (dummy) groups.
    num_real = min(num_micro_batches, len(effective_seqlen))
    partitions = get_seqlen_balanced_partitions(effective_seqlen, num_real, equal_size=False)
    groups = [sorted(p) for p in partitions]
    groups += [[] for _ in range(num_micro_batches - num_real)]
    return groups


def prepare_dynamic_batch(data: DataProto, max_token_len, dp_group=None):
    idx_groups = rearrange_micro_batches(data.batch, max_token_len, dp_group=dp_group)
    micro_batches = []
    for idx in idx_groups:
        if idx:
            micro_batches.append(data.select_idxs(idx))
        else:
            # Dummy 1-row micro-batch reusing sample 0 with all masks zeroed.
            dummy = data.select_idxs([0])
            dummy.batch["attention_mask"].zero_()
            dummy.batch["response_mask"].zero_()
            micro_batches.append(dummy)
    return micro_batches, idx_groups


class DataParallelPPOActor:
    def __init__(self, config, actor_module, actor_optimizer):
        self.config = config
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer

    def _forward_micro_batch(self, micro_batch):
        out = self.actor_module(
            input_ids=micro_batch.batch["input_ids"],
            attention_mask=micro_batch.batch["attention_mask"],
            position_ids=micro_batch.batch["position_ids"],
            **micro_batch.non_tensor_batch.get("multi_modal_inputs", {}),
        )
        return out.logits.log_softmax(-1)

    def update_policy(self, data: DataProto):
        for mini_batch in data.split(self.config.global_batch_size_per_device):
            if self.config.dynamic_batching:
                micro_batches, _ = prepare_dynamic_batch(
                    mini_batch, self.config.max_token_len_per_gpu, dp_group=dist.group.WORLD
                )
            else:
                micro_batches = mini_batch.split(self.config.micro_batch_size_per_device_for_update)
            for micro_batch in micro_batches:
                log_probs = self._forward_micro_batch(micro_batch)  # FSDP all-gather
                mask = micro_batch.batch["response_mask"]
                loss = -(log_probs.mean(-1) * mask).sum() / max(mask.sum(), 1)
                (loss / len(micro_batches)).backward()  # FSDP reduce-scatter
            self.actor_optimizer.step()
            self.actor_optimizer.zero_grad()
