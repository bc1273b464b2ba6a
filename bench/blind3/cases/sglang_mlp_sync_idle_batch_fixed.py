"""
Source: https://github.com/sgl-project/sglang/pull/25404
Project: SGLang
Reported: 2026-05
Backend: gloo (TP cpu_group) / NCCL
Hang: With DP attention in PD-disaggregated decode mode, every DP rank must join the all_gather in
prepare_mlp_sync_batch_raw(). A rank with no decode work holds a ForwardMode.IDLE batch; the token-count branch
only special-cases None and prebuilt batches, so the idle batch falls into the extend branch and iterates
extend_logprob_start_lens, which is None for idle batches. That rank raises TypeError before the all_gather
while the other 15 DP ranks wait in it forever.
Fix: Treat idle batches like an empty batch (num_tokens = 0) so the idle rank reaches the all_gather.
"""
import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode


class ScheduleBatch:
    def __init__(self, forward_mode, reqs=(), extend_lens=None, extend_logprob_start_lens=None):
        self.forward_mode = forward_mode
        self.reqs = list(reqs)
        self.extend_lens = extend_lens
        self.extend_logprob_start_lens = extend_logprob_start_lens
        self.extend_num_tokens = sum(extend_lens) if extend_lens else 0
        self.global_num_tokens = None

    def batch_size(self):
        return len(self.reqs)


def prepare_mlp_sync_batch_raw(local_batch, dp_size, attn_tp_size, tp_group, get_idle_batch,
                               disable_cuda_graph):
    if (local_batch is None or local_batch.forward_mode.is_prebuilt()
            or local_batch.forward_mode.is_idle()):
        num_tokens = 0
        num_tokens_for_logprob = 0
    elif local_batch.forward_mode.is_decode():
        num_tokens = local_batch.batch_size()
        num_tokens_for_logprob = num_tokens
    else:
        num_tokens = local_batch.extend_num_tokens
        num_tokens_for_logprob = sum(
            max(extend_len - logprob_start_len, 1)
            for logprob_start_len, extend_len in zip(
                local_batch.extend_logprob_start_lens, local_batch.extend_lens)
        )

    can_cuda_graph = int(not disable_cuda_graph and (local_batch is None or local_batch.forward_mode.is_decode_or_idle()))
    is_extend_in_batch = int(local_batch.forward_mode.is_extend()) if local_batch else 0
    local_info = torch.tensor([num_tokens, can_cuda_graph, num_tokens_for_logprob, is_extend_in_batch],
                              dtype=torch.int64)
    gathered = torch.empty((dp_size * attn_tp_size, 4), dtype=torch.int64)
    torch.distributed.all_gather_into_tensor(gathered.flatten(), local_info, group=tp_group.cpu_group)

    global_num_tokens = gathered[:, 0].tolist()
    if local_batch is None and max(global_num_tokens) > 0:
        local_batch = get_idle_batch()
    if local_batch is not None:
        local_batch.global_num_tokens = global_num_tokens
    return local_batch


class SchedulerDPAttnMixin:
    def prepare_mlp_sync_batch(self, local_batch):
        return prepare_mlp_sync_batch_raw(
            local_batch,
            dp_size=self.server_args.dp_size,
            attn_tp_size=self.attn_tp_size,
            tp_group=self.tp_group,
            get_idle_batch=self.get_idle_batch,
            disable_cuda_graph=self.server_args.disable_cuda_graph,
        )

    def get_idle_batch(self):
        return ScheduleBatch(ForwardMode.IDLE)


class DecodeScheduler(SchedulerDPAttnMixin):
    def get_next_disagg_decode_batch_to_run(self):
        batch = self.running_batch if self.running_batch.reqs else ScheduleBatch(ForwardMode.IDLE)
        if self.server_args.enable_dp_attention:
            batch = self.prepare_mlp_sync_batch(batch)
        return batch
