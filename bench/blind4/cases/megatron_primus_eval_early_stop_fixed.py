"""
Source: https://github.com/AMD-AGI/Primus/pull/854
Project: Primus (Megatron-LM backend)
Reported: 2026-07
Backend: NCCL
Hang: For the MLPerf runs the Megatron trainer stops as soon as the validation loss reaches a target. The
evaluator stored a per-rank value in args._eval_val_loss (the local numerator/denominator of this data-parallel
rank), so close to the target one DP rank sees loss <= target and leaves train() while its peers keep training;
the peers then block in the next step's gradient / grad-norm all-reduce that the exited rank never issues.
Fix: All-reduce the loss numerator and denominator over the data-parallel group inside the evaluator so every
rank compares the same global loss against the target.
"""
import os
import time

import torch

from megatron.core import mpu
from megatron.training import get_args
from megatron.training.utils import print_rank_0 as log_rank_0


class MLPerfEvaluator:
    def __init__(self, forward_step_func, data_iterator, model):
        self.forward_step_func = forward_step_func
        self.data_iterator = data_iterator
        self.model = model

    def evaluate(self, eval_iters: int):
        args = get_args()
        total_loss_numerators = {}
        total_loss_denominators = {}
        for m in self.model:
            m.eval()
        with torch.no_grad():
            for _ in range(eval_iters):
                loss_dicts = self.forward_step_func(self.data_iterator, self.model, forward_only=True)
                if mpu.is_pipeline_last_stage(ignore_virtual=True):
                    for loss_dict in loss_dicts:
                        for key, (num, den) in loss_dict.items():
                            total_loss_numerators[key] = total_loss_numerators.get(key, 0.0) + float(num)
                            total_loss_denominators[key] = total_loss_denominators.get(key, 0.0) + float(den)
        for m in self.model:
            m.train()

        key = "lm loss"
        if key in total_loss_numerators:
            # reduce over data-parallel ranks so the loss is the global average, identical on every rank
            reduced = torch.tensor(
                [float(total_loss_numerators[key]), float(total_loss_denominators[key])],
                dtype=torch.float64,
                device="cuda",
            )
            torch.distributed.all_reduce(reduced, group=mpu.get_data_parallel_group())
            args._eval_val_loss = (reduced[0] / reduced[1].clamp(min=1.0)).item()
        return args._eval_val_loss


class MegatronTrainer:
    def __init__(self, evaluator: MLPerfEvaluator, train_step_func):
        self.evaluator = evaluator
        self.train_step_func = train_step_func

    def _target_eval_loss(self) -> float:
        return float(os.environ.get("MLLOG_TARGET_EVAL_LOSS", os.environ.get("TARGET_EVAL_LOSS", "0")))

    def _reached_target(self) -> bool:
        args = get_args()
        target = self._target_eval_loss()
        return target > 0 and args._eval_val_loss <= target

    def train(self, train_start_time: float):
        args = get_args()
        iteration = args.iteration
        while iteration < args.train_iters:
            # contains the DP gradient reduce-scatter/all-reduce and the grad-norm all-reduce
            self.train_step_func()
            iteration += 1
            if args.eval_interval and iteration % args.eval_interval == 0:
                self.evaluator.evaluate(args.eval_iters)
                if self._reached_target():
                    log_rank_0(
                        f"[EarlyStop] Reached target! eval_loss: {args._eval_val_loss:.6f} "
                        f"after {time.time() - train_start_time:.1f}s"
                    )
                    break
        return iteration
