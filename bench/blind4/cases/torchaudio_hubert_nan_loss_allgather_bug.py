"""
Source: https://github.com/pytorch/audio/issues/3749
Project: torchaudio (examples/hubert, Lightning pre-training module)
Reported: 2024-02
Backend: NCCL
Hang: HuBERT pre-training uses manual optimization. After the forward pass, a rank whose loss is inf/NaN
zeroes its gradients and returns None from training_step, skipping the following self.all_gather of the
per-rank frame counts (used to normalize the loss by the global number of frames) and the backward with
its DDP gradient all-reduce. The ranks with a finite loss enter the all_gather and wait for the rank
that left, so training stalls until the NCCL 30-minute watchdog fires.
Fix: make the skip decision collective: gather the frame count and an invalid-loss flag on every rank
first, and if any rank has an invalid loss, skip the step on all ranks together. (The thread gives the
root cause but no merged patch; this is the obvious fix.)
"""
from typing import Optional, Tuple

import torch
from pytorch_lightning import LightningModule


class HuBERTPreTrainModule(LightningModule):
    def __init__(self, model, loss_fn, learning_rate: float = 5e-4, clip_norm: float = 10.0):
        super().__init__()
        self.model = model
        self.loss = loss_fn
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.automatic_optimization = False
        self.scaler = torch.cuda.amp.GradScaler()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.learning_rate,
                                 betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)

    def _step(self, batch, batch_idx, step_type: str) -> Tuple[torch.Tensor, torch.Tensor]:
        waveforms, labels, audio_lengths = batch
        logit_m, logit_u, feature_penalty = self.model(waveforms, labels, audio_lengths)
        loss = self.loss(logit_m, logit_u, feature_penalty)
        num_frame = torch.tensor(logit_m.size(0), device=loss.device, dtype=torch.float)
        self.log(f"{step_type}_loss", loss.item() / max(num_frame.item(), 1.0), on_step=True)
        return loss, num_frame

    def training_step(self, batch, batch_idx) -> Optional[torch.Tensor]:
        opt = self.optimizers()
        opt.zero_grad()
        with torch.cuda.amp.autocast(enabled=True):
            loss, num_frame = self._step(batch, batch_idx, "train")
        if torch.isinf(loss) or torch.isnan(loss):  # DIVERGES
            opt.zero_grad()
            return None

        # normalize the loss by the number of frames summed over all GPUs
        num_frames = self.all_gather(num_frame)
        self.log("Gathered number of frames", num_frames.float().sum(), on_step=True)
        loss *= num_frames.size(0) / num_frames.sum()
        self.manual_backward(self.scaler.scale(loss))
        self.scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.scaler.step(opt)
        self.scaler.update()
        return loss
