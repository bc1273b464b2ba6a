"""
Source: https://github.com/flashinfer-ai/flashinfer/pull/4688
Project: FlashInfer (SM90 MegaMoE EP autotune shim)
Reported: 2026-08
Backend: NCCL
Hang: The multi-rank autotuner scores each knob candidate inside a try block that contains two
_barrier() calls (after applying the knobs, and after warm-up), followed by one trailing _barrier()
after the except. If launch() fails on one rank only (device error, OOM on rank 0 which holds extra
host buffers), that rank jumps to the except, skips the in-try barriers and reaches the trailing one
with a different barrier count, so ranks pair barriers of different candidates and the run wedges.
(Found in the PR review thread.)
Fix (reviewer direction; merged diff not seen, so this is the obvious fix): Keep collective calls out of the try: record a per-rank failure flag, then agree on it with an
all_reduce at fixed points that every rank executes.
"""
import math
import statistics
import time
import warnings

import torch
import torch.distributed as dist


def _barrier(group=None) -> None:
    if dist.is_initialized():
        torch.cuda.synchronize()
        dist.barrier(group=group)


class MegaMoEAutotuner:
    def __init__(self, kernel, candidates, warmup: int = 3, iters: int = 10, group=None):
        self.kernel = kernel
        self.candidates = candidates
        self.warmup = warmup
        self.iters = iters
        self.group = group

    def _agree_ok(self, ok: bool) -> bool:
        flag = torch.tensor([0 if ok else 1], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return flag.item() == 0

    def _score(self, label: str, knobs: dict, launch) -> float:
        ok = True
        try:
            self.kernel.apply_knobs(knobs)
            for _ in range(self.warmup):
                launch()  # may fail on a single rank
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 -- score-and-continue by design
            warnings.warn(f"[sm90-autotune] {label}: candidate {knobs} failed: {exc}", RuntimeWarning, stacklevel=2)
            ok = False
        if not self._agree_ok(ok):  # every rank runs this exactly once per phase
            return math.inf
        iters = []
        try:
            for _ in range(self.iters):
                t0 = time.perf_counter()
                launch()
                torch.cuda.synchronize()
                iters.append(time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"[sm90-autotune] {label}: candidate {knobs} failed: {exc}", RuntimeWarning, stacklevel=2)
            ok = False
        if not self._agree_ok(ok):
            return math.inf
        return statistics.median(iters)

    def tune(self, label: str, launch) -> dict:
        scores = [self._score(label, knobs, launch) for knobs in self.candidates]
        t = torch.tensor(scores, device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        best = int(torch.argmin(t).item())
        return self.candidates[best]
