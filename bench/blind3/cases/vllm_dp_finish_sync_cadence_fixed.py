"""
Source: https://github.com/vllm-project/vllm/pull/45223
Project: vLLM
Reported: 2026-06
Backend: gloo (DP cpu group)
Hang: In data-parallel serving every engine core runs a busy loop; when it has no local work but the DP wave is
still running it executes a dummy batch, and it learns whether the wave is over through an all-reduce of the
"has unfinished requests" flag. As an optimization that all-reduce only runs every 32 steps and the cached
engines_running value is used in between. Under sustained multi-node load the per-rank step counters and cached
states drift: one rank takes the idle/dummy branch while another runs a real step or skips the loop iteration,
so they issue a different number of DP coordination all-reduces and the gloo DP group wedges.
Fix: Sync the finish state every step (drop the 32-step modulo gate) so all DP ranks decide from the same
all-reduced value each iteration (fix from the PR, which was closed without merging).
"""
import torch
import torch.distributed as dist

from vllm.logger import init_logger

logger = init_logger(__name__)


class ParallelConfig:
    @staticmethod
    def has_unfinished_dp(dp_group, has_unfinished: bool) -> bool:
        tensor = torch.tensor([has_unfinished], dtype=torch.int32, device="cpu")
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=dp_group)
        return bool(tensor.item())

    @staticmethod
    def sync_dp_state(dp_group, num_tokens: int) -> int:
        tensor = torch.tensor([num_tokens], dtype=torch.int32, device="cpu")
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=dp_group)
        return int(tensor.item())


class DPEngineCoreProc:
    def __init__(self, scheduler, model_executor, dp_group, dp_rank):
        self.scheduler = scheduler
        self.model_executor = model_executor
        self.dp_group = dp_group
        self.dp_rank = dp_rank
        self.engines_running = False
        self.step_counter = 0
        self.current_wave = 0

    def _process_input_queue(self):
        pass

    def _process_engine_step(self) -> bool:
        if not self.scheduler.has_requests():
            return False
        scheduler_output = self.scheduler.schedule()
        # real step: DP padding coordination inside the forward
        ParallelConfig.sync_dp_state(self.dp_group, scheduler_output.total_num_scheduled_tokens)
        self.model_executor.execute_model(scheduler_output)
        return True

    def execute_dummy_batch(self):
        ParallelConfig.sync_dp_state(self.dp_group, 1)
        self.model_executor.execute_dummy_batch()

    def _has_global_unfinished_reqs(self, local_unfinished: bool) -> bool:
        # Sync the finish state every step so all DP ranks act on the same value.
        self.step_counter += 1
        return ParallelConfig.has_unfinished_dp(self.dp_group, local_unfinished)

    def run_busy_loop(self):
        while True:
            self._process_input_queue()
            executed = self._process_engine_step()
            local_unfinished_reqs = self.scheduler.has_unfinished_requests()
            if not executed:
                if not local_unfinished_reqs and not self.engines_running:
                    continue
                self.execute_dummy_batch()

            self.engines_running = self._has_global_unfinished_reqs(local_unfinished_reqs)
            if not self.engines_running:
                logger.debug("DP rank %d wave %d complete", self.dp_rank, self.current_wave)
                self.current_wave += 1
                self.step_counter = 0
