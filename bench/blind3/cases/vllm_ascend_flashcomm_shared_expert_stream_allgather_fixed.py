"""
Source: https://github.com/vllm-project/vllm-ascend/pull/15500
Project: vllm-ascend
Reported: 2026-09
Backend: HCCL
Hang: With enable_flashcomm1 (sequence-parallel hidden states), TP-sharded shared experts and
multistream_overlap_shared_expert, the MoE layer launched the shared-expert input all-gather (TP group) from the
shared-experts side stream while the routed path's EP dispatch/combine (EP group) was enqueued on the default
stream. The two groups' HCCL collectives therefore start in an order that depends on per-rank stream progress,
so some ranks enter the EP all-to-all first and others the TP all-gather first; they wait on each other and the
engine hangs in the profiling dummy run.
Fix: Issue the shared-expert all-gather on the default stream before the routed path is enqueued and hand the
result to the shared-experts stream through an event, leaving the side stream compute-only.
"""
from dataclasses import dataclass

import torch
import torch_npu  # noqa: F401

from vllm.distributed import get_tp_group
from vllm_ascend.ascend_forward_context import get_forward_context
from vllm_ascend.ops.fused_moe.moe_comm_method import get_moe_comm_method


@dataclass
class FusedMoEEvents:
    shared_done: torch.npu.Event
    shared_input_ready: torch.npu.Event


class AscendSharedFusedMoE(torch.nn.Module):
    def __init__(self, shared_experts, experts, multistream_overlap_shared_expert: bool):
        super().__init__()
        self.shared_experts = shared_experts
        self.experts = experts
        self.multistream = multistream_overlap_shared_expert
        self.shared_stream = torch.npu.Stream() if self.multistream else None
        self.tp_group = get_tp_group()

    def _prepare_shared_expert_input(self, hidden_states):
        # flashcomm1: hidden states are sequence-sharded across TP; shared experts are TP-sharded too,
        # so they need the full sequence first
        if get_forward_context().flashcomm_v1_enabled:
            return self.tp_group.all_gather(hidden_states, dim=0)
        return hidden_states

    def _forward_shared_experts(self, hidden_states, events):
        if self.shared_stream is None:
            return self.shared_experts(self._prepare_shared_expert_input(hidden_states))
        # collective stays on the default stream, issued before the routed path is enqueued
        shared_in = self._prepare_shared_expert_input(hidden_states)
        events.shared_input_ready.record(torch.npu.current_stream())
        with torch.npu.stream(self.shared_stream):
            self.shared_stream.wait_event(events.shared_input_ready)
            out = self.shared_experts(shared_in)
            events.shared_done.record(self.shared_stream)
        return out

    def forward(self, hidden_states, router_logits):
        events = FusedMoEEvents(shared_done=torch.npu.Event(), shared_input_ready=torch.npu.Event())
        shared_out = self._forward_shared_experts(hidden_states, events)
        comm = get_moe_comm_method()
        # routed path: EP-group dispatch -> grouped matmul -> combine, on the default stream
        routed = comm.dispatch_and_combine(self.experts, hidden_states, router_logits)
        if self.shared_stream is not None:
            torch.npu.current_stream().wait_event(events.shared_done)
        return shared_out, routed
