"""
Source: https://github.com/huggingface/transformers/pull/40923
Project: HF transformers (Trainer)
Reported: 2025-09
Backend: NCCL
Hang: In `_save_checkpoint` every rank records `state.best_model_checkpoint` only if the best
checkpoint folder already exists on disk, but only process 0 writes that folder and there is no
barrier before the existence check, so a faster non-main rank keeps `best_model_checkpoint=None`.
At the end of training only ranks with a non-None best checkpoint enter the
`load_best_model_at_end` branch and call `dist.barrier()`; rank 0 waits there forever for a rank
that skipped the branch.
Fix: Wait for the main process inside `_save_checkpoint` (a barrier after saving) before testing
whether the best checkpoint directory exists, so all ranks record the same best checkpoint.
"""
import os

import numpy as np
import torch.distributed as dist
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.training_args import ParallelMode


class TrainerState:
    def __init__(self):
        self.global_step = 0
        self.best_metric = None
        self.best_model_checkpoint = None


class MiniTrainer:
    def __init__(self, model, args):
        self.model = model
        self.args = args
        self.state = TrainerState()

    def _get_output_dir(self):
        return self.args.output_dir

    def save_model(self, output_dir):
        # Only the world-process-zero writes files.
        if self.args.should_save:
            os.makedirs(output_dir, exist_ok=True)
            self.model.save_pretrained(output_dir)

    def _determine_best_metric(self, metrics):
        metric_value = metrics[f"eval_{self.args.metric_for_best_model}"]
        operator = np.greater if self.args.greater_is_better else np.less
        if self.state.best_metric is None or operator(metric_value, self.state.best_metric):
            self.state.best_metric = metric_value
            return True
        return False

    def _save_checkpoint(self, metrics=None):
        checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        output_dir = os.path.join(self._get_output_dir(), checkpoint_folder)
        self.save_model(output_dir)
        # Let the main process finish writing before anyone checks the folder.
        self.args.distributed_state.wait_for_everyone()

        if metrics is not None and self.args.metric_for_best_model is not None:
            if self._determine_best_metric(metrics):
                best_checkpoint_dir = output_dir
                if os.path.exists(best_checkpoint_dir):
                    self.state.best_model_checkpoint = best_checkpoint_dir

    def _load_best_model(self):
        self.model.load_adapter_or_weights(self.state.best_model_checkpoint)

    def _finish_training(self):
        if self.args.load_best_model_at_end and self.state.best_model_checkpoint is not None:
            # Wait for everyone so we are sure rank 0 has saved the model.
            if self.args.parallel_mode == ParallelMode.DISTRIBUTED:
                dist.barrier()
            self._load_best_model()

    def train(self, train_steps, evaluate):
        for step in range(train_steps):
            self.state.global_step = step + 1
            if self.state.global_step % self.args.save_steps == 0:
                metrics = evaluate(self.model)
                self._save_checkpoint(metrics)
        self._finish_training()
