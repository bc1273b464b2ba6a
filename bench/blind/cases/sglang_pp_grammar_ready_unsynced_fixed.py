"""
Source: https://github.com/sgl-project/sglang/issues/28424
Project: SGLang (srt/managers/scheduler.py, pipeline parallelism + xgrammar)
Reported: 2026-06
Backend: NCCL
Hang: Grammar-constrained requests wait in grammar_queue until their xgrammar compilation future is
  done. Each scheduler counts the requests whose grammar is ready within a short timeout; the count is
  MAX-reduced over the TP CPU group but not over the PP ranks. Compilation latency differs per process,
  so one PP stage moves a request into waiting_queue and schedules a prefill batch while another stage
  does not, and the stages post mismatched PP send/recv of hidden states for different batches, stalling
  the pipeline.
Fix: Synchronize the number of ready grammar requests across the PP ranks as well (MAX over the PP CPU
  group after the TP reduction), waiting on the remaining futures so all stages move the same requests
  (written as the obvious fix; the issue proposes exactly this synchronization).
"""
from concurrent import futures

import torch
import torch.distributed as dist

from sglang.srt.distributed.parallel_state import get_pp_group


class SchedulerGrammarMixin:
    def _readiness_groups(self):
        if self.server_args.enable_dp_attention:
            groups = [(self.attn_tp_size, self.attn_tp_cpu_group)]
        else:
            groups = [(self.tp_size, self.tp_cpu_group)]
        # PP stages must agree too, otherwise they schedule different batches.
        pp_group = get_pp_group()
        groups.append((pp_group.world_size, pp_group.cpu_group))
        return groups

    def move_ready_grammar_requests(self):
        num_ready_reqs = 0
        for req in self.grammar_queue:
            try:
                req.grammar = req.grammar.result(timeout=0.03)
                self.grammar_backend.set_cache(req.grammar_key, req.grammar.copy())
                num_ready_reqs += 1
            except futures.TimeoutError:
                break

        for size, group in self._readiness_groups():
            if size > 1:
                tensor = torch.tensor(num_ready_reqs, dtype=torch.int32)
                dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
                num_ready_reqs_max = tensor.item()
                for i in range(num_ready_reqs, num_ready_reqs_max):
                    self.grammar_queue[i].grammar = self.grammar_queue[i].grammar.result()
                num_ready_reqs = num_ready_reqs_max

        self._extend_requests_to_queue(self.grammar_queue[:num_ready_reqs])
        self.grammar_queue = self.grammar_queue[num_ready_reqs:]


class SchedulerPPMixin:
    def event_loop_pp(self):
        pp_group = get_pp_group()
        while True:
            recv_reqs = self.recv_requests()
            self.process_input_requests(recv_reqs)
            self.move_ready_grammar_requests()
            batch = self.get_next_batch_to_run()
            if batch is None:
                continue
            if not pp_group.is_first_rank:
                proxy = pp_group.recv_tensor_dict(all_gather_group=self.attn_tp_group)
            else:
                proxy = None
            result = self.run_batch(batch, pp_proxy_tensors=proxy)
            if not pp_group.is_last_rank:
                pp_group.send_tensor_dict(result.pp_hidden_states_proxy_tensors.tensors,
                                          all_gather_group=self.attn_tp_group)
