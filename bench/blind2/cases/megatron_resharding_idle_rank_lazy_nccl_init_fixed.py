"""
Source: https://github.com/NVIDIA/Megatron-LM/pull/6955
Project: Megatron-LM (resharding / refit copy service used by NeMo-RL)
Reported: 2026-08
Backend: NCCL + gloo (hybrid process group)
Hang: NeMo-RL builds a four-rank hybrid group (gloo for CPU, NCCL for CUDA). With TP=1, DP=2 the refit
planner may pick only one training replica as source, so the other training rank has no send/recv
queued. NCCLCopyService.run() returns early on that idle rank and it goes straight to the gloo barrier,
while the active ranks call batch_isend_irecv(), which lazily creates the NCCL communicator and needs
every rank of the group, so they wait forever for the idle rank.
Fix: Eagerly connect the NCCL communicator once in run() before the "anything queued?" check, so idle
ranks also take part in communicator creation.
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.distributed as dist


@dataclass
class CopyOp:
    tensor: torch.Tensor
    peer: int
    is_send: bool


@dataclass
class NCCLCopyService:
    group: Optional[dist.ProcessGroup] = None
    _ops: List[CopyOp] = field(default_factory=list)
    _nccl_connected: bool = False

    def schedule_send(self, tensor: torch.Tensor, dst: int) -> None:
        self._ops.append(CopyOp(tensor, dst, True))

    def schedule_recv(self, tensor: torch.Tensor, src: int) -> None:
        self._ops.append(CopyOp(tensor, src, False))

    def _ensure_nccl_connected(self) -> None:
        if self._nccl_connected:
            return
        group = self.group if self.group is not None else dist.group.WORLD
        device = torch.device("cuda", torch.cuda.current_device())
        group._get_backend(device).eager_connect_single_device(device)
        self._nccl_connected = True

    def run(self) -> None:
        self._ensure_nccl_connected()  # every rank, idle or not
        if not self._ops:
            return
        p2p = [
            dist.P2POp(dist.isend if op.is_send else dist.irecv, op.tensor, op.peer, group=self.group)
            for op in self._ops
        ]
        for work in dist.batch_isend_irecv(p2p):
            work.wait()
        self._ops.clear()


class Resharder:
    """Moves weights from the training layout to the inference layout (refit)."""

    def __init__(self, plan, copy_service: NCCLCopyService, gloo_group: dist.ProcessGroup):
        self.plan = plan
        self.copy = copy_service
        self.gloo_group = gloo_group

    def execute(self, src_params: dict, dst_params: dict) -> None:
        rank = dist.get_rank()
        for transfer in self.plan.transfers_for_rank(rank):
            if transfer.src_rank == rank:
                self.copy.schedule_send(src_params[transfer.name], transfer.dst_rank)
            if transfer.dst_rank == rank:
                self.copy.schedule_recv(dst_params[transfer.name], transfer.src_rank)
        self.copy.run()
        dist.barrier(group=self.gloo_group)
