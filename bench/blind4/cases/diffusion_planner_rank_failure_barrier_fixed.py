"""
Source: https://github.com/tier4/Diffusion-Planner/pull/336
Project: Diffusion-Planner (tier4), distributed closed-loop evaluation
Reported: 2026-07
Backend: gloo
Hang: Closed-loop evaluation shards the scenario jobs over the ranks; each rank runs its jobs, writes a
shard file, and then all ranks meet at a barrier before rank 0 merges the shards. If one rank raises
inside its job loop, the exception unwinds that rank out of the function and it never reaches the
barrier, so every other rank waits there until the job's time limit (and rank 0 may later merge a
truncated shard from the dead rank).
Fix: catch the exception, still reach the barrier, all-reduce a failure flag, and then have every rank
raise together.
"""
import json
import logging
from pathlib import Path
from typing import List

import torch
import torch.distributed as dist

from diffusion_planner.closed_loop.runner import ScenarioRunner

logger = logging.getLogger(__name__)


class ClosedLoopEvaluator:
    def __init__(self, cfg, runner: ScenarioRunner, out_dir: Path):
        self.cfg = cfg
        self.runner = runner
        self.out_dir = out_dir
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1

    def _my_jobs(self, scenarios: List[str]) -> List[str]:
        return scenarios[self.rank::self.world_size]

    def _shard_path(self, rank: int) -> Path:
        return self.out_dir / f"closed_loop_rank{rank}.jsonl"

    def _run_jobs(self, jobs: List[str]) -> None:
        with open(self._shard_path(self.rank), "w") as f:
            for scenario in jobs:
                metrics = self.runner.simulate(scenario)  # may raise on a bad scenario
                f.write(json.dumps({"scenario": scenario, **metrics}) + "\n")

    def _merge(self) -> dict:
        rows = []
        for r in range(self.world_size):
            p = self._shard_path(r)
            if not p.exists():
                raise FileNotFoundError(p)
            rows.extend(json.loads(line) for line in p.read_text().splitlines())
        return {"num_scenarios": len(rows),
                "score": sum(r["score"] for r in rows) / max(len(rows), 1)}

    def evaluate(self, scenarios: List[str]) -> dict:
        jobs = self._my_jobs(scenarios)
        error = None
        try:
            self._run_jobs(jobs)
        except Exception as e:  # keep this rank in the collective sequence
            logger.exception("closed-loop job failed on rank %d", self.rank)
            error = e
        if dist.is_initialized():
            dist.barrier()
            failed = torch.tensor([1 if error is not None else 0], dtype=torch.int64)
            dist.all_reduce(failed, op=dist.ReduceOp.MAX)
            if failed.item():
                raise RuntimeError("closed-loop evaluation failed on at least one rank") from error
        elif error is not None:
            raise error
        summary = self._merge() if self.rank == 0 else {}
        return summary
