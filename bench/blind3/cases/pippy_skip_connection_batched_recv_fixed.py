"""
Source: https://github.com/pytorch/PiPPy/issues/969
Project: PiPPy (pytorch pipeline parallelism)
Reported: 2024-03
Backend: NCCL
Hang: With a skip connection, stage 0's output goes to stage 1 and directly to stage 2. Each stage posts all
of its receives for a microbatch in one batch_isend_irecv group before computing, and posts all of its sends
in one group after computing. Stage 2 therefore groups "recv from 0" with "recv from 1", but stage 1 can only
send to stage 2 after its own compute. NCCL runs a batched group as one fused operation, so stage 2's group
(and with it stage 0's grouped send that includes the 0->2 edge) cannot complete, and the first
batch_isend_irecv never returns.
Fix: (no fix in the thread; obvious fix) do not batch receives whose matching sends are issued in different
phases: post one P2P group per source stage, in the order the sources send, so the 0->2 transfer completes on
its own before stage 2 waits for stage 1.
"""
from typing import Dict, List

import torch
import torch.distributed as dist


class PipelineStage:
    def __init__(self, submod: torch.nn.Module, stage_index: int, num_stages: int,
                 recv_from: List[int], send_to: List[int], act_shape, device):
        self.submod = submod
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.recv_from = recv_from  # e.g. stage 2: [0, 1] because of the skip connection
        self.send_to = send_to      # e.g. stage 0: [1, 2]
        self.act_shape = act_shape
        self.device = device

    def _recv_ops(self, buffers: Dict[int, torch.Tensor]) -> List[dist.P2POp]:
        return [dist.P2POp(dist.irecv, buffers[src], src) for src in self.recv_from]

    def _send_ops(self, out: torch.Tensor) -> List[dist.P2POp]:
        return [dist.P2POp(dist.isend, out, dst) for dst in self.send_to]

    def forward_one_chunk(self, microbatch=None) -> torch.Tensor:
        buffers = {src: torch.empty(self.act_shape, device=self.device) for src in self.recv_from}
        # one P2P group per source, in source-stage order: the 0->2 skip edge completes by itself,
        # before this stage waits for stage 1 (which only sends after its own compute)
        for src in sorted(self.recv_from):
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, buffers[src], src)])
            for w in works:
                w.wait()
        inputs = [buffers[s] for s in self.recv_from] if self.recv_from else [microbatch]
        out = self.submod(*inputs)
        for dst in sorted(self.send_to):
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, dst)])
            for w in works:
                w.wait()
        return out


def run(stage: PipelineStage, microbatches):
    outputs = []
    for mb in microbatches:
        outputs.append(stage.forward_one_chunk(mb if stage.stage_index == 0 else None))
    return outputs
