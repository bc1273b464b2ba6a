"""
Source: https://github.com/vllm-project/vllm-ascend/pull/16167
Project: vLLM Ascend (NPUModelRunner, model_runner_v1.py)
Reported: 2026-09
Backend: HCCL
Hang: After the padding policy was narrowed (#11772), _sync_metadata_across_dp only pads every DP rank
to the DP-wide maximum token count for ALLGATHER, hierarchical MC2 and fine-grained TP. In ACL graph
mode with (non-hierarchical) MC2 each DP rank therefore keeps its own token count, dispatches to a
graph captured for a different size and replays MoE dispatch/combine (EP-wide HCCL ops) with a
different batch shape than its peers; workers get stuck or crash.
Fix: Treat graph mode as a fifth case that always requires DP padding, so every rank runs the same
padded size (active_mask keeps the cost of the padding tokens low).
"""
import torch
import torch.distributed as dist
from vllm.config import CUDAGraphMode
from vllm.distributed.parallel_state import get_dp_group

from vllm_ascend.ascend_forward_context import MoECommType, select_moe_comm_method, set_ascend_forward_context
from vllm_ascend.utils import enable_sp, is_hierarchical_communication_enabled


class NPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank
        self.finegrained_tp_enabled = vllm_config.additional_config.get("finegrained_tp", False)
        self.cudagraph_dispatcher = None  # set up in initialize_kv_cache
        self.model = None

    def _requires_dp_padding(self, comm_method: MoECommType, synced_cudagraph_mode: CUDAGraphMode) -> bool:
        # There are four cases where padding between DPs is required:
        # 1. ALLGATHER needs the same input shape on every rank;
        # 2. hierarchical MC2 does not support a dynamic batch size;
        # 3. fine-grained TP needs equal num_tokens inside the fine-grained group;
        # 4. sequence parallel splits tokens evenly across the group.
        if comm_method == MoECommType.ALLGATHER:
            return True
        if comm_method == MoECommType.MC2 and is_hierarchical_communication_enabled():
            return True
        if self.finegrained_tp_enabled:
            return True
        return enable_sp(self.vllm_config)

    def _sync_metadata_across_dp(self, num_tokens: int, cudagraph_mode: CUDAGraphMode):
        if self.dp_size == 1:
            return num_tokens, None, cudagraph_mode
        packed = torch.zeros(self.dp_size, dtype=torch.int32, device="cpu")
        packed[self.dp_rank] = num_tokens
        dist.all_reduce(packed, group=get_dp_group().cpu_group)
        mode_t = torch.tensor([cudagraph_mode.value], dtype=torch.int32)
        dist.all_reduce(mode_t, op=dist.ReduceOp.MIN, group=get_dp_group().cpu_group)
        num_tokens_across_dp = packed
        synced_mode = CUDAGraphMode(int(mode_t.item()))

        max_tokens_across_dp = int(num_tokens_across_dp.max().item())
        comm_method = select_moe_comm_method(max_tokens_across_dp, self.vllm_config)
        if self._requires_dp_padding(comm_method, synced_mode):
            num_tokens_after_padding = torch.full((self.dp_size,), max_tokens_across_dp, dtype=torch.int32)
        else:
            num_tokens_after_padding = num_tokens_across_dp  # DIVERGES: graph mode keeps per-rank sizes
        return int(num_tokens_after_padding[self.dp_rank].item()), num_tokens_after_padding, synced_mode

    @torch.inference_mode()
    def execute_model(self, scheduler_output, input_ids, positions):
        num_scheduled = scheduler_output.total_num_scheduled_tokens
        desired_mode, _ = self.cudagraph_dispatcher.dispatch(num_tokens=num_scheduled)
        num_input_tokens, num_tokens_across_dp, synced_mode = self._sync_metadata_across_dp(
            num_scheduled, desired_mode
        )
        # graph chosen from this rank's (possibly unpadded) size
        runtime_mode, batch_descriptor = self.cudagraph_dispatcher.dispatch(
            num_tokens=num_input_tokens, disable_full=synced_mode <= CUDAGraphMode.PIECEWISE
        )
        with set_ascend_forward_context(
            None,
            self.vllm_config,
            num_tokens=num_input_tokens,
            num_tokens_across_dp=num_tokens_across_dp,
            aclgraph_runtime_mode=runtime_mode,
            batch_descriptor=batch_descriptor,
        ):
            # MoE layers run MC2 dispatch/combine over the EP group inside the graph
            return self.model(input_ids=input_ids[:num_input_tokens], positions=positions[:num_input_tokens])
