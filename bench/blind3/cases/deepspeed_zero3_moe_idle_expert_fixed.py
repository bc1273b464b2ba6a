"""
Source: https://github.com/deepspeedai/DeepSpeed/issues/5066
Project: DeepSpeed
Reported: 2024-02
Backend: NCCL
Hang: A Mixtral-style sparse MoE block is trained under DeepSpeed ZeRO-3. Each expert is its own submodule, so
ZeRO-3's pre-forward hook all-gathers that expert's partitioned weights when the expert is called. The block
skips any expert that received no tokens in the local micro-batch; routing differs per rank, so one rank skips
expert k (no all_gather) while another rank calls it and waits in the all_gather, and the job times out.
Fix: In training, never skip an expert: feed a dummy token through experts with no routed tokens (zero-weighted)
so every rank runs every expert (workaround given in the thread).
"""
import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F


class MoEConfig:
    def __init__(self, hidden_size=1024, intermediate_size=4096, num_local_experts=8, num_experts_per_tok=2):
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_local_experts = num_local_experts
        self.num_experts_per_tok = num_experts_per_tok


class ExpertMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)

    def forward(self, hidden_states):
        return self.w2(F.silu(self.w1(hidden_states)) * self.w3(hidden_states))


class SparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_dim = config.hidden_size
        self.num_experts = config.num_local_experts
        self.top_k = config.num_experts_per_tok
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)
        self.experts = nn.ModuleList([ExpertMLP(config) for _ in range(self.num_experts)])

    def forward(self, hidden_states):
        batch_size, seq_len, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros_like(hidden_states)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)

        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.shape[0] == 0 and self.training:
                # run the expert anyway on one dummy token with zero weight, so that
                # every rank enters the ZeRO-3 parameter all_gather for this expert
                dummy = hidden_states[:1]
                final_hidden_states[:1] += expert_layer(dummy) * 0.0
                continue
            if top_x.shape[0] == 0:
                continue
            top_x_list = top_x.tolist()
            idx_list = idx.tolist()
            current_state = hidden_states[None, top_x_list].reshape(-1, hidden_dim)
            # ZeRO-3 pre-forward hook all-gathers expert_layer's parameters here
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x_list, idx_list, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))

        return final_hidden_states.reshape(batch_size, seq_len, hidden_dim), router_logits


class MoEModel(nn.Module):
    def __init__(self, config, num_layers=4):
        super().__init__()
        self.layers = nn.ModuleList([SparseMoeBlock(config) for _ in range(num_layers)])
        self.head = nn.Linear(config.hidden_size, 1)

    def forward(self, x):
        for layer in self.layers:
            x, _ = layer(x)
        return self.head(x).mean()


def train(ds_config, data_loader):
    config = MoEConfig()
    with deepspeed.zero.Init(config_dict_or_path=ds_config):
        model = MoEModel(config)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    for batch in data_loader:
        loss = engine(batch.to(engine.device))
        engine.backward(loss)
        engine.step()
