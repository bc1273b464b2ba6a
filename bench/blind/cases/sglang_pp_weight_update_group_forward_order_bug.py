"""
Source: https://github.com/sgl-project/sglang/pull/33934
Project: SGLang (srt/managers/scheduler_pp_mixin.py)
Reported: 2026-08
Backend: NCCL
Hang: With pp_size > 1, control requests reach PP stage 0 and are forwarded stage by stage. Each stage
  first ran the local handler and only then forwarded the request to the next stage. For
  InitWeightsUpdateGroupReqInput the handler creates the weight-update process group, a rendezvous that
  waits for every participating rank, including the ranks of the downstream PP stages. Those ranks are
  still waiting to receive the very request the upstream stage has not forwarded yet: a circular wait.
Fix: Forward received requests to the next PP stage before running their local handlers (in the normal
  and the disaggregated PP loops).
"""
from typing import List

from sglang.srt.managers.io_struct import InitWeightsUpdateGroupReqInput
from sglang.srt.model_executor.model_runner import init_custom_process_group


class ModelRunner:
    def init_weights_update_group(self, master_address, master_port, rank_offset,
                                  world_size, group_name, backend="nccl"):
        rank = rank_offset + self.tp_rank + self.pp_rank * self.tp_size
        # blocks until all `world_size` ranks (trainer + every inference rank) joined
        self._model_update_group[group_name] = init_custom_process_group(
            backend=backend,
            init_method=f"tcp://{master_address}:{master_port}",
            world_size=world_size,
            rank=rank,
            group_name=group_name,
        )
        return True, "Succeeded to initialize custom process group."


class SchedulerPPMixin:
    def init_weights_update_group(self, recv_req: InitWeightsUpdateGroupReqInput):
        success, message = self.tp_worker.model_runner.init_weights_update_group(
            recv_req.master_address, recv_req.master_port, recv_req.rank_offset,
            recv_req.world_size, recv_req.group_name, recv_req.backend)
        return success, message

    def _process_and_forward(self, recv_reqs: List):
        self.process_input_requests(recv_reqs)  # DIVERGES
        if not self.pp_group.is_last_rank:
            self._pp_send_pyobj_to_next_stage(recv_reqs, async_send=True)

    def event_loop_pp(self):
        while True:
            # stage 0 reads from the tokenizer, later stages from the previous stage
            recv_reqs = self.recv_requests()
            self._process_and_forward(recv_reqs)
            batch = self.get_next_batch_to_run()
            if batch is not None:
                self._run_pp_microbatch(batch)
