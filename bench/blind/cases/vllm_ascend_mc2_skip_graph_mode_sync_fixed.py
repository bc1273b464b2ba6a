"""
Source: https://github.com/vllm-project/vllm-ascend/issues/13826
Project: vllm-ascend (worker/model_runner_v1.py, MC2 + ACLGraph + DP/EP)
Reported: 2026-08
Backend: HCCL
Hang: _sync_metadata_across_dp returns early when should_skip_allreduce_across_dp_group() is true
  (MC2 copes with uneven token counts, so the token-count all_reduce is skipped). That early return
  also skips the MIN-reduction of the cudagraph mode, so at the variable-length tail an idle DP rank
  (dummy run, eager) and busy ranks (FULL_DECODE_ONLY graph replay) submit graph and eager work into the
  same EP collective; the decode service hangs with all NPUs busy.
Fix: In the skip branch keep the per-rank token counts but still all-reduce (MIN) the cudagraph mode
  over the DP CPU group when ACLGraph is enabled for the main MoE model (PR #13827/#13828).
"""
import torch
import torch.distributed as dist

from vllm.config import CUDAGraphMode
from vllm.distributed.parallel_state import get_dp_group

from vllm_ascend.utils import should_skip_allreduce_across_dp_group


def _post_process_cudagraph_mode(packed: torch.Tensor) -> int:
    return int(packed[1, :].min().item())


class NPUModelRunner:
    def _sync_metadata_across_dp(self, num_tokens: int, is_draft_model: bool = False,
                                 cudagraph_mode: int = CUDAGraphMode.NONE.value,
                                 allow_dp_padding: bool = True):
        if self.dp_size == 1:
            return num_tokens, None, cudagraph_mode
        if should_skip_allreduce_across_dp_group(self.vllm_config, is_draft_model):
            # MC2 handles uneven counts; no need to talk to the other DP ranks.
            num_tokens_after_padding = torch.tensor([num_tokens] * self.dp_size,
                                                    device="cpu", dtype=torch.int32)
            if self.use_aclgraph and not is_draft_model:
                # Token counts stay per-rank, but the graph mode must still agree.
                mode_tensor = torch.tensor([cudagraph_mode], dtype=torch.int32, device="cpu")
                dist.all_reduce(mode_tensor, op=dist.ReduceOp.MIN, group=get_dp_group().cpu_group)
                cudagraph_mode = int(mode_tensor.item())
            return num_tokens, num_tokens_after_padding, cudagraph_mode
        packed = torch.zeros(2, self.dp_size, dtype=torch.int32, device="cpu")
        packed[0, self.dp_rank] = num_tokens
        packed[1, :] = CUDAGraphMode.FULL.value
        packed[1, self.dp_rank] = cudagraph_mode
        dist.all_reduce(packed, op=dist.ReduceOp.SUM, group=get_dp_group().cpu_group)
        num_tokens_across_dp = packed[0, :]
        max_tokens = int(num_tokens_across_dp.max().item())
        synced_mode = _post_process_cudagraph_mode(packed)
        after_pad = torch.tensor([max_tokens] * self.dp_size, device="cpu", dtype=torch.int32)
        return max_tokens, after_pad, synced_mode

    def _run_with_mode(self, num_tokens, uniform_decode, attn_metadata):
        local_mode, _ = self.cudagraph_dispatcher.dispatch(num_tokens=num_tokens,
                                                           uniform_decode=uniform_decode)
        num_tokens, num_tokens_across_dp, synced_mode = self._sync_metadata_across_dp(
            num_tokens, cudagraph_mode=local_mode.value)
        mode, batch_descriptor = self.cudagraph_dispatcher.dispatch(
            num_tokens=num_tokens, uniform_decode=uniform_decode,
            disable_full=synced_mode <= CUDAGraphMode.PIECEWISE.value)
        return self._forward(num_tokens, num_tokens_across_dp, mode, batch_descriptor, attn_metadata)

    def execute_model(self, scheduler_output):
        if scheduler_output.total_num_scheduled_tokens == 0:
            return self._dummy_run(1)
        num_tokens, uniform_decode, attn_metadata = self._prepare_inputs(scheduler_output)
        return self._run_with_mode(num_tokens, uniform_decode, attn_metadata)

    def _dummy_run(self, num_tokens: int, uniform_decode: bool = False):
        return self._run_with_mode(num_tokens, uniform_decode, None)
