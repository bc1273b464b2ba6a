"""
Source: https://github.com/sgl-project/sglang/pull/33614
Project: SGLang
Reported: 2026-08
Backend: NCCL
Hang: With TP > 1, DSpark speculative decoding takes sampling decisions independently on every TP rank: the
draft Markov chain samples proposal tokens with in-graph noise, target verification derives correct_len / bonus
tokens, and prefill samples next_token_ids. SGLang skips cross-rank sync of sampled tokens by default, so
nothing forces these per-rank values to agree; once one rank accepts a different number of draft tokens its
sequence lengths and KV state drift from its peers, the next step's batch shapes differ per rank, and a later
TP collective (logits all-gather / all-reduce) deadlocks.
Fix: Broadcast TP rank 0's sampling decisions (proposal tokens, correct_len, bonus, next_token_ids) before they
update any state, following the existing verify_lens handling.
"""
import torch

from sglang.srt.distributed import get_tp_group


class DSparkVerifyOutput:
    def __init__(self, correct_len, bonus, next_token_ids):
        self.correct_len = correct_len
        self.bonus = bonus
        self.next_token_ids = next_token_ids


class DSparkWorker:
    def __init__(self, target_worker, draft_model, num_draft_tokens, tp_size):
        self.target_worker = target_worker
        self.draft_model = draft_model
        self.num_draft_tokens = num_draft_tokens
        self.tp_size = tp_size
        self.tp_group = get_tp_group()

    def _sync(self, tensor):
        if self.tp_size > 1:
            self.tp_group.broadcast(tensor, src=0)
        return tensor

    def _propose(self, batch):
        tokens = []
        hidden = self.draft_model.embed(batch.input_ids)
        for _ in range(self.num_draft_tokens):
            logits = self.draft_model.step(hidden)
            noise = torch.rand_like(logits)  # per-rank philox stream
            tok = torch.argmax(logits - torch.log(-torch.log(noise)), dim=-1)
            tok = self._sync(tok)  # every rank continues the chain from rank 0's token
            tokens.append(tok)
            hidden = self.draft_model.embed(tok)
        return torch.stack(tokens, dim=1)

    def _verify(self, batch, draft_tokens):
        logits = self.target_worker.forward_verify(batch, draft_tokens)  # TP all-gather of logits
        target_tokens = torch.multinomial(torch.softmax(logits.flatten(0, 1), -1), 1).view(logits.shape[:2])
        matches = (target_tokens[:, :-1] == draft_tokens).int()
        correct_len = matches.cumprod(dim=1).sum(dim=1)
        bonus = target_tokens.gather(1, correct_len.unsqueeze(1)).squeeze(1)
        return DSparkVerifyOutput(correct_len, bonus, target_tokens)

    def forward_batch_generation(self, batch):
        draft_tokens = self._propose(batch)
        out = self._verify(batch, draft_tokens)
        # rank 0's decisions win before they touch any state
        out.correct_len = self._sync(out.correct_len)
        out.bonus = self._sync(out.bonus)
        out.next_token_ids = self._sync(out.next_token_ids)
        self._commit(batch, draft_tokens, out)
        return out

    def _commit(self, batch, draft_tokens, out):
        for i, req in enumerate(batch.reqs):
            n = int(out.correct_len[i])
            req.output_ids.extend(draft_tokens[i, :n].tolist() + [int(out.bonus[i])])
        batch.seq_lens += out.correct_len + 1  # next step's shapes depend on this
