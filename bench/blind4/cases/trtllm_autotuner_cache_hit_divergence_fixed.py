"""
Source: https://github.com/NVIDIA/TensorRT-LLM/pull/14240
Project: TensorRT-LLM (PyTorch backend AutoTuner, attention-DP + MoE EP)
Reported: 2026-05
Backend: NCCL
Hang: AutoTuner.choose_one first looks the op's input shapes up in the profiling cache. With attention
DP and MoE expert parallelism every rank sees different per-expert routing shapes, so the lookup hits
on some ranks and misses on others. Ranks that hit return the cached tactic immediately; ranks that
miss go through the profiling loop, which ends by merging the chosen tactic across the TP group with a
collective. The missing ranks wait in that collective while the hitting ranks have already moved on to
the next collective-issuing warmup step: a silent hang during autotuner warmup.
Fix: take a collective vote on the cache hit (MIN all-reduce over the TP group) and only use the cached
tactic when every rank hit; otherwise every rank goes through the profiling path together.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from tensorrt_llm._torch.distributed import Distributed
from tensorrt_llm.logger import logger


class ProfilingCache:
    def __init__(self):
        self.cache: Dict[Tuple, Tuple[int, int, Any]] = {}

    def get_cache_key(self, custom_op: str, runners, input_shapes) -> Tuple:
        return (custom_op, tuple(type(r).__name__ for r in runners), tuple(input_shapes))

    def search_cache(self, custom_op, runners, input_shapes, tuning_config):
        key = self.get_cache_key(custom_op, runners, input_shapes)
        if key in self.cache:
            runner_id, tactic, profile = self.cache[key]
            return True, runner_id, tactic, profile
        return False, 0, -1, None


class AutoTuner:
    _instance: Optional["AutoTuner"] = None

    def __init__(self):
        self.profiling_cache = ProfilingCache()
        self.is_tuning_mode = False
        self._dist: Optional[Distributed] = None

    @classmethod
    def get(cls) -> "AutoTuner":
        if cls._instance is None:
            cls._instance = AutoTuner()
        return cls._instance

    def setup_distributed_state(self, mapping, dist_obj: Distributed) -> None:
        self.mapping = mapping
        self._dist = dist_obj

    def _profile_runners(self, custom_op, runners, inputs, tuning_config) -> Tuple[int, int, float]:
        best = (0, -1, float("inf"))
        for runner_id, runner in enumerate(runners):
            for tactic in runner.get_valid_tactics(inputs, tuning_config):
                t = self._profile_single_kernel(runner, inputs, tactic)
                if t < best[2]:
                    best = (runner_id, tactic, t)
        return best

    def _profile_single_kernel(self, runner, inputs, tactic) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        runner(inputs, tactic=tactic)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    def _all_tp_ranks_hit(self, is_cache_hit: bool) -> bool:
        if self._dist is None or self.mapping.tp_size <= 1:
            return is_cache_hit
        return bool(self._dist.tp_allreduce(int(is_cache_hit), op="min"))

    def _maybe_sync_tactic_across_tp(self, runner_id: int, tactic: int) -> Tuple[int, int]:
        # every TP rank must run the same tactic: take rank 0's choice
        if self._dist is not None and self.mapping.tp_size > 1:
            runner_id, tactic = self._dist.tp_broadcast((runner_id, tactic), root=0)
        return runner_id, tactic

    def choose_one(self, custom_op: str, runners: List[Callable], tuning_config,
                   inputs: List[torch.Tensor], **kwargs) -> Tuple[Callable, int]:
        input_shapes = [tuple(t.shape) for t in inputs]
        is_cache_hit, runner_id, tactic, _ = self.profiling_cache.search_cache(
            custom_op, runners, input_shapes, tuning_config)
        if not self.is_tuning_mode:
            return runners[runner_id], tactic
        # per-expert routing shapes differ between ranks under ADP + EP: vote on the hit
        if self._all_tp_ranks_hit(is_cache_hit):
            return runners[runner_id], tactic

        runner_id, tactic, best_time = self._profile_runners(custom_op, runners, inputs, tuning_config)
        runner_id, tactic = self._maybe_sync_tactic_across_tp(runner_id, tactic)
        key = self.profiling_cache.get_cache_key(custom_op, runners, input_shapes)
        self.profiling_cache.cache[key] = (runner_id, tactic, None)
        logger.debug(f"[Autotuner] {custom_op}: tactic {tactic} ({best_time:.3f} ms)")
        return runners[runner_id], tactic
