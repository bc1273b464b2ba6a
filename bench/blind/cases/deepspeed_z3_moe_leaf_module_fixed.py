"""
Source: https://github.com/deepspeedai/DeepSpeed/pull/4966
Project: DeepSpeed (ZeRO-3) with HF Mixtral-style MoE
Reported: 2024-01
Backend: NCCL
Hang: Under ZeRO-3 every submodule's parameters are all-gathered by a forward pre-hook when that
submodule runs. The sparse MoE block only calls the experts that received tokens on this rank and
`continue`s past the others, and routing depends on each rank's own batch. Ranks therefore fire the
expert all-gathers for different experts (and a different number of them), the collectives pair up
wrongly, and training hangs (typically in the first steps).
Fix: The PR adds `deepspeed.utils.set_z3_leaf_modules`; marking the MoE block as a ZeRO-3 leaf
makes its pre-hook gather all expert parameters at once on entry, independent of routing.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
import deepspeed


class Zero3Coordinator:
    """Condensed view of ZeRO-3 param fetching: hooks on each submodule gather its params."""

    def __init__(self, group=None):
        self.group = group

    def fetch(self, module):
        for p in module.parameters(recurse=False):
            full = torch.empty(p.ds_numel, dtype=p.dtype, device=p.device)
            dist.all_gather_into_tensor(full, p.ds_tensor, group=self.group)
            p.data = full.view(p.ds_shape)

    def release(self, module):
        for p in module.parameters(recurse=False):
            p.data = p.ds_tensor

    def fetch_leaf(self, module):
        for m in module.modules():
            self.fetch(m)

    def release_leaf(self, module):
        for m in module.modules():
            self.release(m)

    def register(self, model):
        inside_leaf = set()
        for m in model.modules():
            if id(m) in inside_leaf:
                continue
            if getattr(m, "_z3_leaf", False):
                # Leaf: gather every expert on entry, whatever the routing on this rank.
                m.register_forward_pre_hook(lambda mod, _in: self.fetch_leaf(mod))
                m.register_forward_hook(lambda mod, _in, _out: self.release_leaf(mod))
                inside_leaf.update(id(c) for c in m.modules())
                continue
            m.register_forward_pre_hook(lambda mod, _in: self.fetch(mod))
            m.register_forward_hook(lambda mod, _in, _out: self.release(mod))


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x, routing_weights):
        return routing_weights * self.w2(F.silu(self.w1(x)) * self.w3(x))


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, hidden, ffn, num_experts=8, top_k=2):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(hidden, ffn) for _ in range(num_experts)])

    def forward(self, hidden_states):
        b, s, h = hidden_states.shape
        hidden_states = hidden_states.view(-1, h)
        routing_weights = F.softmax(self.gate(hidden_states), dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        final = torch.zeros_like(hidden_states)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.shape[0] == 0:
                continue
            expert_layer = self.experts[expert_idx]
            current = hidden_states[top_x]
            out = expert_layer(current, routing_weights[top_x, idx, None])
            final.index_add_(0, top_x, out.to(hidden_states.dtype))
        return final.view(b, s, h)


def build_engine(model, ds_config):
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config
    )
    return engine


def train(model, ds_config, dataloader):
    from deepspeed.utils import set_z3_leaf_modules
    set_z3_leaf_modules(model, [MixtralSparseMoeBlock])
    engine = build_engine(model, ds_config)
    Zero3Coordinator().register(engine.module)
    for batch in dataloader:
        loss = engine(**batch).loss
        engine.backward(loss)
        engine.step()
