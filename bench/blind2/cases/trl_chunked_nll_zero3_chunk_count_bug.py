"""
Source: https://github.com/huggingface/trl/pull/6698
Project: TRL
Reported: 2026-08
Backend: NCCL
Hang: SFTTrainer(loss_type="chunked_nll") under DeepSpeed ZeRO-3 splits the valid
(assistant/completion-only) tokens of the local batch into chunks and, for each chunk,
calls the lm_head, whose ZeRO-3 parameters are all-gathered across ranks. The number of
valid tokens, hence the chunk count, differs per rank, so a rank with fewer chunks leaves
the loop while the others start another lm_head all-gather; a fully masked rank runs no
chunk at all.
Fix: all_reduce(MAX) the chunk count so every rank runs the same number of chunks
(padding with empty chunks, fully masked ranks included) and clamp only the local
denominator.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import Trainer


class SFTTrainer(Trainer):
    def __init__(self, *args, loss_type: str = "nll", chunk_size: int = 1024, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_type = loss_type
        self.chunk_size = chunk_size

    def _num_chunks(self, n_valid: int) -> int:
        return (n_valid + self.chunk_size - 1) // self.chunk_size

    def _chunked_nll_loss(self, model, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        lm_head = model.get_output_embeddings()
        valid = labels != -100
        h = hidden[valid]
        y = labels[valid]
        n_chunks = self._num_chunks(h.shape[0])  # local, differs per rank
        total = hidden.new_zeros(())
        for i in range(n_chunks):  # DIVERGES
            sl = slice(i * self.chunk_size, (i + 1) * self.chunk_size)
            logits = lm_head(h[sl])  # ZeRO-3 gathers lm_head weight here
            total = total + F.cross_entropy(logits.float(), y[sl], reduction="sum")
        return total / y.numel()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        if self.loss_type != "chunked_nll":
            outputs = model(**inputs, labels=labels)
            return (outputs.loss, outputs) if return_outputs else outputs.loss
        outputs = model.model(**inputs)
        hidden = outputs.last_hidden_state[:, :-1]
        loss = self._chunked_nll_loss(model, hidden, labels[:, 1:])
        return (loss, outputs) if return_outputs else loss
