"""
Source: https://github.com/sgl-project/sglang/pull/34238
Project: SGLang (EAGLE speculative decoding on ROCm)
Reported: 2026-08
Backend: NCCL
Hang: With TP > 1 on ROCm, eagle_sample() always takes the greedy verify path. That path
computes the accepted tokens locally on every TP rank, and the draft candidates it sees
can differ slightly across ranks, so ranks accept different numbers of drafts. Each rank
then updates seq_lens and the running batch from its own verify result; the ranks'
batches diverge (24 vs 25 requests), later steps issue collectives with different shapes
or skip them, and the scheduler deadlocks until the watchdog fires. The sampling path
already broadcast its result from TP rank 0; the greedy path did not.
Fix: on ROCm, broadcast predict, accept_index and num_correct_drafts from TP rank 0 after
the verify decision so every rank applies the same result.
"""
import torch

from sglang.srt.distributed import get_tp_group
from sglang.srt.utils import is_hip

_is_hip = is_hip()


def tree_greedy_verify(candidates, retrive_index, target_predict):
    predict = target_predict.argmax(dim=-1)
    accept_index = (candidates == predict).cumprod(dim=-1)
    num_correct = accept_index.sum(dim=-1).to(torch.int32)
    return predict, accept_index, num_correct


class EagleVerifyInput:
    def __init__(self, draft_token, retrive_index, topk: int):
        self.draft_token = draft_token
        self.retrive_index = retrive_index
        self.topk = topk

    def eagle_sample(self, logits_output, sampling_info):
        candidates = self.draft_token.view(-1, self.topk)
        if _is_hip or sampling_info.is_all_greedy:
            predict, accept_index, num_correct_drafts = tree_greedy_verify(
                candidates, self.retrive_index, logits_output.next_token_logits)
            if _is_hip:
                # make every TP rank apply TP rank 0's verify decision
                tp = get_tp_group()
                for t in (predict, accept_index, num_correct_drafts):
                    tp.broadcast(t, src=0)
        else:
            predict, accept_index, num_correct_drafts = self._sample_verify(
                candidates, logits_output, sampling_info)
            tp = get_tp_group()
            for t in (predict, accept_index, num_correct_drafts):
                tp.broadcast(t, src=0)
        return predict, accept_index, num_correct_drafts

    def _sample_verify(self, candidates, logits_output, sampling_info):
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        predict = torch.multinomial(probs, 1).squeeze(-1)
        accept_index = (candidates == predict.view(-1, 1)).cumprod(dim=-1)
        return predict, accept_index, accept_index.sum(dim=-1).to(torch.int32)

    def verify(self, batch, logits_output):
        predict, accept_index, num_correct = self.eagle_sample(logits_output, batch.sampling_info)
        # every rank advances its own copy of the batch from the verify result
        batch.seq_lens.add_(num_correct + 1)
        finished = [i for i, r in enumerate(batch.reqs) if r.check_finished(predict[i])]
        batch.filter_batch(keep_indices=[i for i in range(len(batch.reqs)) if i not in finished])
        return predict, accept_index
