"""
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/21264
Project: PyTorch Lightning (TQDMProgressBar callback), fix proposed in PR #21322
Reported: 2025-10
Backend: NCCL
Hang: At the end of a training epoch the TQDM progress bar refreshes its postfix only when its bar is
enabled, and the bar is enabled only on rank 0. Fetching the postfix calls get_metrics(), which goes
through the trainer's progress_bar_metrics into the logger connector and computes the epoch-level
logged values; values logged with sync_dist=True are all-reduced at that point. So rank 0 enters an
all_reduce for the metric sync while the other ranks, whose bars are disabled, never request the
metrics and move on: the DDP job hangs unless another code path happens to request them on every rank.
Fix: compute the metrics on every rank (get_metrics is collective) and only skip the tqdm update on
ranks whose bar is disabled. (The exact diff of PR #21322 is not visible in the thread; this is the
fix the report describes.)
"""
from typing import Any, Dict, Optional, Union

import torch
import torch.distributed as dist
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar


class _ResultMetric:
    """Epoch accumulator for one logged value, as kept by the logger connector."""

    def __init__(self, name: str, sync_dist: bool, group=None):
        self.name = name
        self.sync_dist = sync_dist
        self.group = group
        self.value = torch.zeros(())
        self.count = torch.zeros(())
        self._computed: Optional[torch.Tensor] = None

    def update(self, v: torch.Tensor, n: int) -> None:
        self.value += v.detach() * n
        self.count += n
        self._computed = None

    def compute(self) -> torch.Tensor:
        if self._computed is None:
            total = torch.stack([self.value, self.count])
            if self.sync_dist and dist.is_available() and dist.is_initialized():
                dist.all_reduce(total, group=self.group)
            self._computed = total[0] / total[1].clamp(min=1)
        return self._computed


class _LoggerConnector:
    def __init__(self):
        self.results: Dict[str, _ResultMetric] = {}

    @property
    def progress_bar_metrics(self) -> Dict[str, float]:
        return {k: float(m.compute()) for k, m in self.results.items()}


class TQDMProgressBar(ProgressBar):
    def __init__(self, refresh_rate: int = 1):
        super().__init__()
        self._refresh_rate = refresh_rate
        self.train_progress_bar = None

    def get_metrics(self, trainer, pl_module) -> Dict[str, Union[int, str, float]]:
        items = dict(trainer._logger_connector.progress_bar_metrics)
        items.pop("v_num", None)
        return items

    def on_train_epoch_start(self, trainer, *_: Any) -> None:
        self.train_progress_bar.reset(total=self.total_train_batches)
        self.train_progress_bar.initial = 0
        self.train_progress_bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # the bar is created with disable=not trainer.is_global_zero
        if not self.train_progress_bar.disable:  # DIVERGES
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
        if self._leave:
            self.train_progress_bar.close()
