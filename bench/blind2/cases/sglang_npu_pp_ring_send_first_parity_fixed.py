"""
Source: https://github.com/sgl-project/sglang/pull/30844
Project: SGLang (Ascend NPU, pipeline parallel scheduler)
Reported: 2026-07
Backend: HCCL
Hang: In the PP event loop every stage forwards its data to the next stage and receives
from the previous one around a ring. On CUDA, isend is asynchronous, so every rank can
send first. HCCL's send blocks until the peer posts the matching recv; to avoid a cycle
the scheduler alternates the order by PP-rank parity ("send_first"), but that parity
check was enabled only for XPU. On NPU every stage therefore sends first, each blocks
waiting for a neighbour that is itself blocked in send, and the ring deadlocks (TP>1,
PP>1).
Fix: include NPU in the send_first parity check so even stages send then receive and odd
stages receive then send.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from sglang.srt.distributed import get_pp_group
from sglang.srt.utils import is_npu, is_xpu


class SchedulerPPMixin:
    def init_pp_ring(self):
        self.pp_group = get_pp_group()
        self.pp_rank = self.pp_group.rank_in_group
        self.pp_size = self.pp_group.world_size
        # devices whose point-to-point send blocks until the receiver arrives
        self._pp_send_first = (self.pp_rank % 2 == 0) if (is_xpu() or is_npu()) else True

    @property
    def _next_rank(self) -> int:
        return self.pp_group.ranks[(self.pp_rank + 1) % self.pp_size]

    @property
    def _prev_rank(self) -> int:
        return self.pp_group.ranks[(self.pp_rank - 1) % self.pp_size]

    def _pp_send(self, t: torch.Tensor):
        dist.send(t, dst=self._next_rank, group=self.pp_group.device_group)

    def _pp_recv(self, like: torch.Tensor) -> torch.Tensor:
        buf = torch.empty_like(like)
        dist.recv(buf, src=self._prev_rank, group=self.pp_group.device_group)
        return buf

    def pp_exchange(self, outgoing: torch.Tensor) -> torch.Tensor:
        if self._pp_send_first:
            self._pp_send(outgoing)
            return self._pp_recv(outgoing)
        incoming = self._pp_recv(outgoing)
        self._pp_send(outgoing)
        return incoming

    def event_loop_pp(self):
        self.init_pp_ring()
        hidden = torch.zeros(16, 4096, device="npu")
        while True:
            hidden = self.pp_exchange(hidden)
