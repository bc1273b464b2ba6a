"""
Source: https://github.com/vllm-project/afd-plugin/issues/247 (fix: https://github.com/vllm-project/afd-plugin/pull/248)
Project: afd-plugin (vLLM Attention-FFN disaggregation on Ascend NPU)
Reported: 2026-08
Backend: HCCL
Hang: The CAM async AFD connector lazily creates its CANN/CAM communicator (a collective over all Attention
ranks and the FFN daemon) on the first dispatch. An upgrade made the connector skip its I/O during
profile_run(), so no rank initialized the communicator at startup. With Attention DP2 the first request lands on
only one Attention replica: that rank enters the communicator setup / async_dispatch_send while the other
Attention rank sits idle waiting for a request, and the FFN waits in async_dispatch_recv; the request only
proceeds once a second request drives the other replica into the same call.
Fix: Restore the matched CAM connector traffic during profile_run() on every Attention rank (and keep AFD's
async-DP engine semantics), so the communicator is set up collectively before serving.
"""
import torch
import torch_npu  # noqa: F401

from vllm_ascend.worker.model_runner_v1 import NPUModelRunner
from afd_plugin.connectors.cam_async import CAMAsyncAFDConnector as _CAMConnectorBase


class CAMAsyncAFDConnector(_CAMConnectorBase):
    def __init__(self, afd_config, rank, world):
        self.afd_config = afd_config
        self.rank = rank
        self.world = world
        self._comm = None  # created lazily

    def _ensure_comm(self):
        if self._comm is None:
            # collective init: every Attention rank + the FFN daemon must call this together
            self._comm = self._init_cam_communicator(self.world)
        return self._comm

    def async_dispatch_send(self, hidden_states, topk_ids):
        comm = self._ensure_comm()
        return comm.dispatch_send(hidden_states, topk_ids)

    def async_combine_recv(self, handle):
        return self._comm.combine_recv(handle)


class AFDAttentionModelRunner(NPUModelRunner):
    def __init__(self, vllm_config, device, connector: CAMAsyncAFDConnector):
        super().__init__(vllm_config, device)
        self.connector = connector
        self.in_profile_run = False

    def _moe_via_ffn(self, hidden_states, topk_ids):
        if self.in_profile_run:
            # skip connector traffic while profiling memory
            return torch.zeros_like(hidden_states)  # DIVERGES
        handle = self.connector.async_dispatch_send(hidden_states, topk_ids)  # DIVERGES
        return self.connector.async_combine_recv(handle)

    def profile_run(self):
        self.in_profile_run = True
        try:
            self._dummy_run(self.max_num_tokens)
        finally:
            self.in_profile_run = False

    def execute_model(self, scheduler_output):
        # only the DP replica that received the request gets here
        hidden_states, topk_ids = self._attention_forward(scheduler_output)
        return self._moe_via_ffn(hidden_states, topk_ids)
