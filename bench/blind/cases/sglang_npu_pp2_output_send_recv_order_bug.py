"""
Source: https://github.com/sgl-project/sglang/pull/23477
Project: SGLang on Ascend NPU (srt/managers/scheduler_pp_mixin.py)
Reported: 2026-04
Backend: HCCL
Hang: In the PP event loop the sampled outputs travel around the pipeline ring: the last stage sends
  next_token_ids to stage 0, and every non-last stage forwards the outputs of the previous round to its
  next stage and receives the outputs of the coming micro-batch from its previous stage. Non-last stages
  sent before receiving, the same order as the last stage. With pp_size == 2 the two stages are each
  other's prev and next, so both post a blocking HCCL send to each other first and neither ever reaches
  its receive (torch_npu p2p send does not complete without the matching receive).
Fix: On every stage except the last, receive the coming micro-batch's outputs before sending outputs
  on; the last stage keeps send-then-receive, so each send meets a posted receive (the thread gives only
  this description of the change; the code layout here is reconstructed).
"""
from sglang.srt.distributed.parallel_state import get_pp_group
from sglang.srt.model_executor.forward_batch_info import PPProxyTensors


class SchedulerPPMixin:
    def _pp_send_outputs(self, pp_outputs):
        if pp_outputs is not None:
            self.pp_group.send_tensor_dict(pp_outputs.tensors, all_gather_group=self.attn_tp_group)

    def _pp_recv_outputs(self):
        return PPProxyTensors(self.pp_group.recv_tensor_dict(all_gather_group=self.attn_tp_group))

    def _pp_exchange_outputs(self, mbs, mb_id, result, pp_outputs):
        next_mb_id = (mb_id + 1) % self.pp_size
        next_pp_outputs = None
        if self.pp_group.is_last_rank:
            if self.cur_batch is not None:
                pp_outputs = PPProxyTensors({"next_token_ids": result.next_token_ids})
                self._pp_send_outputs(pp_outputs)
            if mbs[next_mb_id] is not None:
                next_pp_outputs = self._pp_recv_outputs()
            return next_pp_outputs
        # non-last stages: carry last round's outputs on, then pick up the coming ones
        self._pp_send_outputs(pp_outputs)  # DIVERGES
        if mbs[next_mb_id] is not None:
            next_pp_outputs = self._pp_recv_outputs()
        return next_pp_outputs

    def event_loop_pp(self):
        self.pp_group = get_pp_group()
        mbs = [None] * self.pp_size
        pp_outputs = None
        while True:
            for mb_id in range(self.pp_size):
                self.cur_batch = self.get_next_batch_to_run()
                mbs[mb_id] = self.cur_batch
                result = self.run_batch(self.cur_batch) if self.cur_batch is not None else None
                pp_outputs = self._pp_exchange_outputs(mbs, mb_id, result, pp_outputs)
                if pp_outputs is not None:
                    self.process_batch_result(mbs[(mb_id + 1) % self.pp_size], pp_outputs)
                if not self.pp_group.is_last_rank and self.cur_batch is not None:
                    self.pp_group.send_tensor_dict(result.pp_hidden_states_proxy_tensors.tensors,
                                                   all_gather_group=self.attn_tp_group)
