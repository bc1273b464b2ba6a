"""
Source: https://github.com/OpenPipe/ART/pull/843 (issue: https://github.com/OpenPipe/ART/issues/840)
Project: ART (OpenPipe)
Reported: 2026-09
Backend: NCCL
Hang: The cost-calibration harness warms each packing layout up until a forward pass runs without a
torch.compile recompilation, then moves to the next candidate. The "compile-free" test used per-process compile
telemetry, and the CP rank whose shard shapes differ (rank 3) recompiled once more than ranks 0-2. Ranks 0-2 moved
on to the next layout while rank 3 ran another warm-up of the old one, so the context-parallel all-to-alls paired
two different layouts (mismatched split sizes) and deadlocked.
Fix: Decide when warm-ups are done from world-wide telemetry: all-reduce the per-rank "recompiled" flag (MAX) so
every rank stops warming up the same candidate at the same iteration.
"""
import torch
import torch.distributed as dist
from torch._dynamo.utils import counters

from art.megatron.trainer_rank import dp_rank_forward
from art.megatron.parallel_state import get_context_parallel_group


class CompileTelemetry:
    """Counts dynamo frame compilations seen by this process."""

    def __init__(self):
        self._last = 0

    def snapshot(self) -> int:
        return int(sum(counters["stats"].values()))

    def recompiled_since_last(self) -> bool:
        now = self.snapshot()
        changed = now != self._last
        self._last = now
        return changed


class CostCalibrator:
    def __init__(self, model, max_warmups: int = 4, repeat: int = 8):
        self.model = model
        self.max_warmups = max_warmups
        self.repeat = repeat
        self.telemetry = CompileTelemetry()
        self.cp_group = get_context_parallel_group()

    def _warmup_done(self) -> bool:
        recompiled = self.telemetry.recompiled_since_last()
        flag = torch.tensor([1 if recompiled else 0], dtype=torch.int32, device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # world-wide: any rank recompiled -> keep warming up
        return flag.item() == 0

    def _warmup(self, layout, batch):
        for _ in range(self.max_warmups):
            dp_rank_forward(self.model, batch, layout=layout)  # CP all_to_all inside
            if self._warmup_done():
                break

    def _measure(self, layout, batch):
        times = []
        for _ in range(self.repeat):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dp_rank_forward(self.model, batch, layout=layout)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return sum(times) / len(times)

    def calibrate(self, batch, candidate_layouts):
        results = {}
        for layout in candidate_layouts:
            self._warmup(layout, batch)
            results[layout.name] = self._measure(layout, batch)
        return results
