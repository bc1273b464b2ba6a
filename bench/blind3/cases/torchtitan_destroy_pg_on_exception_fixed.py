"""
Source: https://github.com/pytorch/torchtitan/pull/1342
Project: torchtitan
Reported: 2025-06
Backend: NCCL
Hang: train.py wraps the run in try/finally and always calls trainer.close() and
torch.distributed.destroy_process_group() in the finally block. When one rank raises inside train() (e.g. a
data or OOM error in a step) it jumps to the finally block and blocks in destroy_process_group, while the other
ranks are still inside the step's FSDP/loss collectives waiting for it. The failing rank never exits, so
torchrun never notices the failure and the whole job hangs instead of crashing.
Fix: Only close the trainer and destroy the process group when training finished without an exception; on an
exception re-raise immediately so the process exits.
"""
import os

import torch
import torch.distributed as dist

from torchtitan.config import ConfigManager, JobConfig
from torchtitan.tools.logging import init_logger, logger


class Trainer(torch.distributed.checkpoint.stateful.Stateful):
    def __init__(self, job_config: JobConfig):
        self.job_config = job_config
        self.step = 0
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        self.model_parts = self._build_model()
        self.dataloader = self._build_dataloader()

    def _build_model(self):
        return [torch.nn.Linear(16, 16).cuda()]

    def _build_dataloader(self):
        return iter([])

    def train_step(self, batch):
        inputs, labels = batch
        loss = torch.nn.functional.mse_loss(self.model_parts[0](inputs), labels)
        loss.backward()
        # grad-norm clipping and loss logging all-reduce over the DP mesh
        total = loss.detach().clone()
        dist.all_reduce(total)
        return total

    def train(self):
        for batch in self.dataloader:
            self.step += 1
            self.train_step(batch)

    def close(self):
        logger.info("closing trainer")

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state_dict):
        self.step = state_dict["step"]


def main():
    init_logger()
    config_manager = ConfigManager()
    config = config_manager.parse_args()
    trainer = None
    try:
        trainer = Trainer(config)
        trainer.train()
    except Exception:
        # do not tear down the process group while peers may still be inside collectives
        raise
    else:
        trainer.close()
        dist.destroy_process_group()
        logger.info("Process group destroyed.")


if __name__ == "__main__":
    main()
