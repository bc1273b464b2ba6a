"""
Source: https://github.com/EleutherAI/lm-evaluation-harness/issues/951
Project: lm-evaluation-harness (evaluator.evaluate, multi-process with DeepSpeed ZeRO-3 / FSDP)
Reported: 2023-11
Backend: NCCL
Hang: Each rank builds its share of a task's requests, then the ranks gather their request counts and
each rank records how many padding requests it needs so that every rank runs the same number of
forward batches (ZeRO-3 / FSDP all-gather parameters inside every forward). For multiple-choice tasks
the padding count is stored under the task's OUTPUT_TYPE ("multiple_choice") but read back under the
request type actually executed ("loglikelihood"), so no padding is ever added. Ranks with fewer
requests finish their forward loop early and move on while the others still issue parameter
all-gathers in their remaining batches: the evaluation hangs at the end (boolq, mmlu, ...).
Fix: accumulate the padding under the same request-type key that is used when running the requests
(padding_requests[reqtype] += numpad).
"""
import collections
from typing import Dict, List

import torch
from lm_eval.api.model import LM
from lm_eval.utils import eval_logger


def build_requests(task_dict: Dict, lm: LM, limit=None):
    requests = collections.defaultdict(list)
    padding_requests = collections.defaultdict(int)

    for task_name, task in task_dict.items():
        task.build_all_requests(limit=limit, rank=lm.rank, world_size=lm.world_size)
        # multiple_choice tasks are executed as loglikelihood requests
        reqtype = "loglikelihood" if task.OUTPUT_TYPE == "multiple_choice" else task.OUTPUT_TYPE
        requests[reqtype].extend(task.instances)

        if lm.world_size > 1:
            instances_rnk = torch.tensor(len(task._instances), device=lm.device)
            gathered = lm.accelerator.gather(instances_rnk).cpu().detach().numpy().tolist()
            # number of pseudo-requests needed so all ranks run equally many batches
            numpad = max(gathered) - gathered[lm.rank]
            padding_requests[task.OUTPUT_TYPE] += numpad  # DIVERGES
    return requests, padding_requests


def run_requests(lm: LM, requests, padding_requests) -> Dict[str, List]:
    results = {}
    for reqtype, reqs in requests.items():
        eval_logger.info(f"Running {reqtype} requests")
        cloned_reqs = []
        for req in reqs:
            cloned_reqs.extend([req] * req.repeats)

        if lm.world_size > 1 and padding_requests[reqtype] > 0:
            for _ in range(padding_requests[reqtype]):
                cloned_reqs.extend([req] * req.repeats)

        # each batch inside is a model forward; under ZeRO-3 every forward all-gathers params
        results[reqtype] = getattr(lm, reqtype)(cloned_reqs)

        if lm.world_size > 1:
            lm.accelerator.wait_for_everyone()
    return results


def evaluate(lm: LM, task_dict: Dict, limit=None):
    requests, padding_requests = build_requests(task_dict, lm, limit)
    return run_requests(lm, requests, padding_requests)
