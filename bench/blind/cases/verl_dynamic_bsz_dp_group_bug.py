"""
Source: https://github.com/verl-project/verl/issues/6176
Project: verl (FSDP actor, dynamic batch size)
Reported: 2026-04
Backend: NCCL
Hang: With `use_dynamic_bsz`, each data-parallel rank splits its own data into micro-batches by
token budget. `rearrange_micro_batches` is meant to all-reduce (MAX) the micro-batch count across
the DP group, but it only does so when a `dp_group` is passed, and the FSDP actor never passes one.
Ranks with more tokens loop over more micro-batches; every extra `actor_module(...)` forward issues
FSDP parameter all-gathers that the ranks which already left the loop never join.
Fix: Pass the data-parallel group (`torch.distributed.group.WORLD` for the FSDP actor) into
`prepare_dynamic_batch` in `compute_log_prob` and `update_policy`, so the micro-batch counts are
synchronised (as done in the merged fix PR #5591).
"""
import torch
import torch.distributed as dist

from verl import DataProto
from verl.utils.device import get_device_name


def ceildiv(a, b):
    return -(a // -b)


def rearrange_micro_batches(batch, max_token_len, dp_group=None, same_micro_num_in_dp=True):
    seq_len_effective = batch["attention_mask"].sum(dim=1)
    total_seqlen = seq_len_effective.sum().item()
    num_micro_batches = min(len(seq_len_effective), ceildiv(total_seqlen, max_token_len))
    if dist.is_initialized() and same_micro_num_in_dp and dp_group is not None:  # DIVERGES
        t = torch.tensor([num_micro_batches], device=get_device_name())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dp_group)
        num_micro_batches = t.cpu().item()
    order = torch.argsort(seq_len_effective, descending=True).tolist()
    batch_idx_list = [order[i::num_micro_batches] for i in range(num_micro_batches)]
    return batch_idx_list


def prepare_dynamic_batch(data: DataProto, max_token_len, dp_group=None):
    batch_idx_list = rearrange_micro_batches(data.batch, max_token_len=max_token_len, dp_group=dp_group)
    micro_batches = [data.select_idxs(idx) for idx in batch_idx_list]
    return micro_batches, batch_idx_list


class DataParallelPPOActor:
    def __init__(self, config, actor_module, actor_optimizer=None):
        self.config = config
        self.actor_module = actor_module  # FSDP-wrapped
        self.actor_optimizer = actor_optimizer
        self.use_dynamic_bsz = config.use_dynamic_bsz
        self.ulysses_sequence_parallel_size = config.ulysses_sequence_parallel_size

    def _forward_micro_batch(self, micro_batch, temperature):
        # FSDP forward: all-gathers flat params of each wrapped unit.
        output = self.actor_module(
            input_ids=micro_batch.batch["input_ids"],
            attention_mask=micro_batch.batch["attention_mask"],
            position_ids=micro_batch.batch["position_ids"],
        )
        return output.logits.div_(temperature).log_softmax(-1)

    def compute_log_prob(self, data: DataProto):
        micro_batch_size = data.meta_info["micro_batch_size"]
        temperature = data.meta_info["temperature"]
        if self.use_dynamic_bsz:
            max_token_len = data.meta_info["max_token_len"] * self.ulysses_sequence_parallel_size
            micro_batches, batch_idx_list = prepare_dynamic_batch(data, max_token_len=max_token_len)
        else:
            micro_batches = data.split(micro_batch_size)
        log_probs_lst = []
        for micro_batch in micro_batches:  # DIVERGES
            with torch.no_grad():
                log_probs_lst.append(self._forward_micro_batch(micro_batch, temperature))
        return torch.cat(log_probs_lst, dim=0)

    def update_policy(self, data: DataProto):
        temperature = data.meta_info["temperature"]
        mini_batches = data.split(self.config.ppo_mini_batch_size)
        for mini_batch in mini_batches:
            if self.use_dynamic_bsz:
                max_token_len = self.config.ppo_max_token_len_per_gpu * self.ulysses_sequence_parallel_size
                micro_batches, _ = prepare_dynamic_batch(mini_batch, max_token_len=max_token_len)
            else:
                micro_batches = mini_batch.split(self.config.ppo_micro_batch_size_per_gpu)
            self.actor_optimizer.zero_grad()
            for micro_batch in micro_batches:  # DIVERGES
                log_prob = self._forward_micro_batch(micro_batch, temperature)
                loss = -(log_prob.mean()) / len(micro_batches)
                loss.backward()  # FSDP reduce-scatter
            self.actor_optimizer.step()
