"""
Source: https://github.com/vllm-project/vllm-ascend/pull/9689
Project: vllm-ascend
Reported: 2026-05
Backend: HCCL
Hang: With DP > 1 on a MoE target and the extract_hidden_states proposer, the Ascend
proposer inherits upstream vLLM's _determine_batch_execution_and_padding, which runs
coordinate_batch_across_dp and posts a [4, dp_size] int32 all_reduce on the DP cpu
group. The Ascend model runner (and the idle rank's dummy path) syncs DP metadata with
its own _sync_metadata_across_dp, a [2, dp_size] all_reduce on the same group. A busy
rank and an idle rank therefore post different collectives in the same step; gloo
reports a size mismatch ("8 vs 4") or the step hangs.
Fix: override _determine_batch_execution_and_padding in the Ascend proposer so it
syncs through the runner's _sync_metadata_across_dp like every other Ascend path.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from vllm.distributed.parallel_state import get_dp_group
from vllm.v1.spec_decode.extract_hidden_states import ExtractHiddenStatesProposer


def coordinate_batch_across_dp(num_tokens, dp_size, dp_rank, uniform_decode, cudagraph_mode):
    # upstream vLLM: 4 rows of metadata per DP rank
    t = torch.zeros(4, dp_size, dtype=torch.int32)
    t[0][dp_rank] = num_tokens
    t[1][dp_rank] = num_tokens
    t[2][dp_rank] = int(uniform_decode)
    t[3][dp_rank] = int(cudagraph_mode)
    dist.all_reduce(t, group=get_dp_group().cpu_group)
    return t


class NPUModelRunner:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank
        self.drafter = None

    def _sync_metadata_across_dp(self, num_tokens: int, with_prefill: bool):
        # Ascend: 2 rows of metadata per DP rank
        t = torch.zeros(2, self.dp_size, dtype=torch.int32)
        t[0][self.dp_rank] = num_tokens
        t[1][self.dp_rank] = int(with_prefill)
        dist.all_reduce(t, group=get_dp_group().cpu_group)
        return int(t[0].max()), t[0], bool(t[1].any())

    def _dummy_run(self, num_tokens: int, with_prefill: bool = False):
        max_tokens, across_dp, _ = self._sync_metadata_across_dp(num_tokens, with_prefill)
        self._run_target(max_tokens, across_dp)
        if self.drafter is not None:
            self.drafter.dummy_run(max_tokens)

    def execute_model(self, scheduler_output):
        n = scheduler_output.total_num_scheduled_tokens
        max_tokens, across_dp, with_prefill = self._sync_metadata_across_dp(n, False)
        hidden = self._run_target(max_tokens, across_dp)
        if self.drafter is not None:
            self.drafter.propose(hidden, n)
        return hidden

    def _run_target(self, num_tokens, num_tokens_across_dp):
        return torch.empty(num_tokens, 16)


class AscendExtractHiddenStatesProposer(ExtractHiddenStatesProposer):
    def __init__(self, vllm_config, runner: NPUModelRunner):
        self.vllm_config = vllm_config
        self.runner = runner
        self.dp_size = runner.dp_size
        self.dp_rank = runner.dp_rank

    # _determine_batch_execution_and_padding is NOT overridden: the upstream version
    # (below, as inherited) is what runs on Ascend.
    def _determine_batch_execution_and_padding(self, num_tokens: int, uniform_decode: bool):
        across_dp = coordinate_batch_across_dp(  # DIVERGES
            num_tokens, self.dp_size, self.dp_rank, uniform_decode, 0)
        return int(across_dp[1].max()), across_dp[1]

    def dummy_run(self, num_tokens: int):
        # idle-rank path: tokens already agreed by the runner's Ascend sync
        self._run_drafter(num_tokens)

    def propose(self, hidden_states, num_tokens: int):
        padded, across_dp = self._determine_batch_execution_and_padding(num_tokens, True)
        return self._run_drafter(padded)

    def _run_drafter(self, num_tokens):
        return torch.empty(num_tokens)
