"""
Source: https://github.com/vllm-project/vllm/pull/54618
Project: vLLM (model warmup: FlashInfer autotune with a persisted cache, TP/EP)
Reported: 2026-08
Backend: NCCL (timings all-reduced on the world CPU group)
Hang: vLLM preloads a persisted FlashInfer autotune cache on every rank and then runs the warmup forward
inside the autotuner, with an autotune process group set so each tactic's timing is all-reduced across
ranks inside _profile_single_kernel. The cache is written by the leader only, so under TP/EP (different
local MoE shapes per rank) rank 0 gets cache hits and takes the fast path that skips profiling, while
the other ranks miss and block in the per-tactic all-reduce that rank 0 never issues; rank 0 meanwhile
races into the model's output all-reduce. Cold starts work; the second start hangs.
Fix: do not preload the persisted cache into the tuner when tuning across several ranks, so every rank
starts from an empty tuner and profiles the same tactics in lockstep; the cache is still saved after.
(PR was closed; the fix is the approach its description gives.)
"""
import os
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch
from flashinfer.autotuner import AutoTuner, autotune, set_autotune_process_group

from vllm.distributed.parallel_state import get_world_group
from vllm.logger import init_logger

if TYPE_CHECKING:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

logger = init_logger(__name__)


def _autotune_cache_file(runner: "GPUModelRunner") -> str:
    root = os.environ.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
                          os.path.expanduser("~/.cache/vllm/flashinfer_autotune"))
    return os.path.join(root, f"{runner.model_config.model.replace('/', '_')}.json")


def _load_persisted_configs(path: str) -> None:
    world = get_world_group()
    payload = None
    if world.rank_in_group == 0 and os.path.exists(path):
        with open(path) as f:
            payload = f.read()
    payload = world.broadcast_object(payload, src=0)
    if payload is not None:
        # every rank gets rank 0's entries, i.e. rank 0's MoE shapes only
        AutoTuner.get().load_configs_from_str(payload)


class _FlashInferAutoTunerView:
    """How flashinfer's AutoTuner.choose_one behaves once a process group is set."""

    def choose_one(self, tuner: AutoTuner, custom_op, runners, tuning_config, inputs):
        shapes = tuple(tuple(t.shape) for t in inputs)
        hit, runner_id, tactic, _ = tuner.search_cache(custom_op, runners, shapes, tuning_config)
        if hit:
            return runners[runner_id], tactic
        best = None
        for rid, r in enumerate(runners):
            for tac in r.get_valid_tactics(inputs, tuning_config):
                t = tuner._profile_single_kernel(r, inputs, tac)  # all_reduce(mean) inside
                if best is None or t < best[0]:
                    best = (t, rid, tac)
        return runners[best[1]], best[2]


def flashinfer_autotune(runner: "GPUModelRunner") -> None:
    world = get_world_group()
    cache_path = _autotune_cache_file(runner)
    if world.world_size > 1:
        set_autotune_process_group(world.cpu_group)
        # a warm cache lets some ranks skip profiling (and its per-tactic all-reduce):
        # tune from an empty tuner on every rank instead
    else:
        _load_persisted_configs(cache_path)
    with torch.inference_mode(), autotune(True):
        runner._dummy_run(runner.scheduler_config.max_num_batched_tokens,
                          skip_eplb=True, is_profile=True)
    if world.rank_in_group == 0:
        os.makedirs(os.path.dirname(cache_path), exist_ok=True)
        AutoTuner.get().save_configs(cache_path)
    world.barrier()
