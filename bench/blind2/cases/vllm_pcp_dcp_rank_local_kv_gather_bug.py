"""
Source: https://github.com/vllm-project/vllm/issues/53573
Project: vLLM (MLA prefill with PCP + DCP)
Reported: 2026-08
Backend: NCCL
Hang: With prefill context parallel (PCP=2) and decode context parallel (DCP=2), MLA
prefill metadata for the context (KV-cache) chunks is derived from each PCP rank's own
virtual batch. PCP ranks own different query positions, so their local context lengths
differ; for a two-token prefill one rank computes zero context chunks and skips the DCP
KV-gather collective, while the other rank has one chunk and enters it. The gather times
out ("direct DCP kv-gather multimem timeout").
Fix: derive the context-chunk schedule from metadata that is identical on all ranks of
the DCP group (max context length across the PCP ranks), so every rank issues the same
number of KV gathers with the same shapes (obvious fix; the issue describes the cause).
"""
from dataclasses import dataclass
from typing import List

import torch
import torch.distributed as dist

from vllm.distributed.parallel_state import get_dcp_group, get_pcp_group


@dataclass
class ChunkedContextMetadata:
    chunk_starts: List[int]
    chunk_lens: List[int]


class MLACommonMetadataBuilder:
    def __init__(self, max_context_chunk: int):
        self.max_context_chunk = max_context_chunk
        self.dcp = get_dcp_group()

    def _local_context_len(self, common_attn_metadata) -> int:
        # context tokens visible to THIS PCP rank's slice of the prefill
        return int(common_attn_metadata.num_computed_tokens_cpu[self.pcp_rank_slice(common_attn_metadata)].max())

    def pcp_rank_slice(self, common_attn_metadata):
        return slice(0, common_attn_metadata.num_reqs)

    def build_chunked_context(self, common_attn_metadata) -> ChunkedContextMetadata:
        max_context_len = self._local_context_len(common_attn_metadata)  # DIVERGES
        starts, lens = [], []
        pos = 0
        while pos < max_context_len:
            n = min(self.max_context_chunk, max_context_len - pos)
            starts.append(pos)
            lens.append(n)
            pos += n
        return ChunkedContextMetadata(chunk_starts=starts, chunk_lens=lens)


def compute_prefill_context(kv_cache: torch.Tensor, ctx: ChunkedContextMetadata) -> List[torch.Tensor]:
    dcp = get_dcp_group()
    outs = []
    for start, n in zip(ctx.chunk_starts, ctx.chunk_lens):
        local = kv_cache[start:start + n]
        # gather the KV shards held by the other DCP ranks
        outs.append(dcp.all_gather(local, dim=0))
    return outs
