#!/usr/bin/env python3
"""pretrain_difflm --model-type bert beside an independent PyTorch BERT (docs/bert.md, "Beside PyTorch").

The reference is written here in torch.nn by hand (not transformers' BertModel, which is post-norm):
Megatron's pre-norm BERT as BertTrainer builds it -- token + learned position + token-type embeddings
(no embedding norm), pre-norm layers (LayerNorm, bidirectional attention, LayerNorm, exact-GELU MLP),
a final LayerNorm, the MLM head (dense, exact GELU, LayerNorm, decoder tied to the word embeddings,
an output bias) and the sentence-order head (pooler: dense + tanh of the first row; then C -> 2).

It starts from the weights of one of our checkpoints (--init: a run with --lr 0 for one step leaves
the initialisation unchanged), reads the samples our run consumed (--samples: `inspect_data
--bert-samples`), and trains as the trainer does: per micro-batch the MLM loss is the mean over its
masked tokens and the SOP loss the mean over its sequences, the step's loss the mean over the global
batch's micro-batches; the global gradient norm clipped (clip / (norm + 1e-6)); torch's AdamW with
weight decay on the matrices and embeddings only; Megatron's LR schedule (warmup, then linear or
cosine decay to --min-lr). Our run's per-step losses come from its metrics.jsonl (--ours, run with
--log-interval 1). Writes a CSV and, when matplotlib imports, a PNG of both curves.

Legend: B micro-batch, T sequence length, C hidden, H heads, D head size, F ffn, V vocabulary,
M micro-batches per step.
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

import side_by_side as sbs


class Layer(nn.Module):
    """Pre-norm: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x))))."""

    def __init__(self, C, H, D, F_, eps):
        super().__init__()
        self.H, self.D = H, D
        self.input_layernorm = nn.LayerNorm(C, eps=eps)
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(C, H * D), nn.Linear(C, H * D), nn.Linear(C, H * D)
        self.o_proj = nn.Linear(H * D, C)
        self.post_attention_layernorm = nn.LayerNorm(C, eps=eps)
        self.fc1, self.fc2 = nn.Linear(C, F_), nn.Linear(F_, C)

    def forward(self, x, allowed):  # x [B, T, C], allowed [B, 1, T, T] (query, key)
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(B, T, self.H, self.D).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.D)  # [B, H, T, T]
        a = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ v  # [B, H, T, D]
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, self.H * self.D))
        return x + self.fc2(F.gelu(self.fc1(self.post_attention_layernorm(x)), approximate="none"))


class Bert(nn.Module):
    def __init__(self, cfg, binary_head):
        super().__init__()
        C, H, V = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
        D, F_, eps = cfg["kv_channels"], cfg["ffn_hidden_size"], cfg["norm_epsilon"]
        self.embed_tokens = nn.Embedding(V, C)
        self.embed_positions = nn.Embedding(cfg["max_position_embeddings"], C)
        self.embed_token_types = nn.Embedding(2, C)
        self.layers = nn.ModuleList(Layer(C, H, D, F_, eps) for _ in range(cfg["num_layers"]))
        self.norm = nn.LayerNorm(C, eps=eps)
        self.mlm_dense = nn.Linear(C, C)
        self.mlm_norm = nn.LayerNorm(C, eps=eps)
        self.mlm_bias = nn.Parameter(torch.zeros(V))
        self.binary = binary_head
        if binary_head:
            self.pooler = nn.Linear(C, C)
            self.binary_head = nn.Linear(C, 2)

    def load_ours(self, tensors):
        """Our checkpoint's names onto this module's; every tensor used, every parameter set."""
        rename = {"mlm_head.dense.": "mlm_dense.", "mlm_head.norm.": "mlm_norm.", "mlm_head.bias": "mlm_bias",
                  "pooler.dense.": "pooler."}
        state = {}
        for name, t in tensors.items():
            for a, b in rename.items():
                if name.startswith(a):
                    name = b + name[len(a):]
            state[name.replace(".self_attn.", ".").replace(".mlp.", ".")] = t
        self.load_state_dict(state, strict=True)

    def forward(self, tokens, types, pad, labels, is_random):
        """tokens, types, labels [B, T] (labels -1: no loss), pad [B, T] (1 on tokens), is_random [B]."""
        B, T = tokens.shape
        x = self.embed_tokens(tokens) + self.embed_positions(torch.arange(T))[None] + self.embed_token_types(types)
        # A query sees the keys of its own kind: tokens see tokens, padding sees padding (no loss there).
        seg = pad == 0
        allowed = (seg[:, :, None] == seg[:, None, :])[:, None]
        for layer in self.layers:
            x = layer(x, allowed)
        x = self.norm(x)
        rows = labels.reshape(-1) != -1
        h = x.reshape(B * T, -1)[rows]
        h = self.mlm_norm(F.gelu(self.mlm_dense(h), approximate="none"))
        logits = h @ self.embed_tokens.weight.t() + self.mlm_bias  # [masked, V]
        mlm = F.cross_entropy(logits, labels.reshape(-1)[rows], reduction="sum") / max(int(rows.sum()), 1)
        if not self.binary:
            return mlm, torch.zeros((), dtype=x.dtype)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        sop = F.cross_entropy(self.binary_head(pooled), is_random)
        return mlm, sop


def batch(rows):
    def t(key):
        return torch.tensor([r[key] for r in rows], dtype=torch.long)
    return t("tokens"), t("token_types"), t("padding_mask"), t("labels"), t("is_random")


def main():
    p = sbs.parser(__doc__)
    p.add_argument("--init", required=True, help="our checkpoint holding the initial weights (run or iter_* dir)")
    p.add_argument("--samples", required=True, help="inspect_data --bert-samples output of the run's flags")
    p.add_argument("--ours", required=True, help="our run's --save directory (metrics.jsonl, --log-interval 1)")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"], help="the reference's precision")
    sbs.add_run_flags(p)
    a = p.parse_args()

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    dtype = getattr(torch, a.dtype)
    init = sbs.checkpoint_dir(a.init)
    meta = json.load(open(os.path.join(init, "state.json")))["meta"]
    if meta.get("model_type") != "bert" or not meta.get("bert_pre_norm", False):
        sys.exit(f"{init}: not a pre-norm bert checkpoint")
    model = Bert(meta["config"], meta.get("bert_binary_head", True))
    model.load_ours(load_file(os.path.join(init, "model.safetensors")))
    model.to(dtype)

    opt = sbs.adamw(model, a, lambda name, q: q.dim() < 2)
    B, G = a.micro_batch_size, a.global_batch_size
    M = G // B
    samples = sbs.read_samples(a.samples, a.train_iters * G)
    ours = sbs.our_metrics(a.ours, "mlm_loss")

    rows = []
    for step in range(1, a.train_iters + 1):
        opt.zero_grad(set_to_none=False)
        mlm_sum = sop_sum = 0.0
        for m in range(M):
            first = (step - 1) * G + m * B
            mlm, sop = model(*batch(samples[first:first + B]))
            ((mlm + sop) / M).backward()
            mlm_sum += mlm.item() / M
            sop_sum += sop.item() / M
        norm, lr = sbs.update(model, opt, step, a)
        o = ours.get(step, {})
        o_mlm, o_sop = o.get("mlm_loss", float("nan")), o.get("sop_loss", 0.0 if o else float("nan"))
        rows.append({"step": step, "lr": lr, "ours_mlm": o_mlm, "torch_mlm": mlm_sum, "ours_sop": o_sop,
                     "torch_sop": sop_sum, "rel_mlm": sbs.rel(o_mlm, mlm_sum), "rel_sop": sbs.rel(o_sop, sop_sum),
                     "torch_grad_norm": norm})

    print(f"last step: ours mlm {rows[-1]['ours_mlm']:.6f} sop {rows[-1]['ours_sop']:.6f}; "
          f"torch mlm {rows[-1]['torch_mlm']:.6f} sop {rows[-1]['torch_sop']:.6f}")
    sbs.report(rows, a, ("rel_mlm", "rel_sop"),
               [(name, [("ours_" + key, sbs.OURS), ("torch_" + key, sbs.TORCH)], False)
                for name, key in (("MLM loss", "mlm"), ("SOP loss", "sop"))])


if __name__ == "__main__":
    main()
