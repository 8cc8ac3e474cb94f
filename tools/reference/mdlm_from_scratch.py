#!/usr/bin/env python3
"""An independent PyTorch masked diffusion LM trained from scratch, to compare the shape of its early
loss curve with pretrain_difflm's (docs/study_repetition.md: the unigram plateau).

The model is the study's: LLaMA-style blocks (RMSNorm, SwiGLU, RoPE, no biases), tied embeddings,
bidirectional attention, initialised N(0, 0.02) with the output projections scaled by 1/sqrt(2 L) as
Megatron does; the loss is MDLM's (t antithetic over the batch, mask probability (1 - eps) t + eps,
cross-entropy of the masked tokens over that probability, normalised by the batch's tokens); AdamW
(0.9, 0.999), weight decay 0.01, gradient clipping at 1.0, linear warm-up and cosine decay. Windows of
--seq tokens are drawn uniformly from the .bin (documents concatenated, as Megatron's GPT dataset
packs them). Prints the mean training loss every --log-interval iterations, and the unigram entropy of
the data for reference.

    python3 tools/reference/mdlm_from_scratch.py --data runs/demo/fortunes_text_document --vocab 4096 \
        --mask-id 1 [--layers 4 --hidden 128 --heads 4 --ffn 384 --seq 64 --batch 8 --iters 3000 --lr 2e-3]
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="Megatron prefix (uint16 .bin)")
    for name, default in [("vocab", 4096), ("mask-id", 1), ("layers", 4), ("hidden", 128), ("heads", 4),
                          ("ffn", 384), ("seq", 64), ("batch", 8), ("iters", 3000), ("warmup", 50),
                          ("log-interval", 100), ("seed", 1234), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--eps", type=float, default=1e-3)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, C, H, F_, L):
        super().__init__()
        self.H = H
        self.n1, self.n2 = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)
        for w in (self.qkv.weight, self.gate_up.weight):
            nn.init.normal_(w, std=0.02)
        for w in (self.proj.weight, self.down.weight):
            nn.init.normal_(w, std=0.02 / math.sqrt(2 * L))

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def rope(x, cos, sin):  # x: (B, H, T, D), rotate-half convention
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.hidden)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(a.hidden, a.heads, a.ffn, a.layers) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.hidden, eps=1e-5)
        D = a.hidden // a.heads
        inv = 10000.0 ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2.0 / D)
        ang = torch.arange(a.seq, dtype=torch.float64)[:, None] * inv[None, :]  # (T, D/2)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.norm(x) @ self.emb.weight.t()


def main():
    a = parse()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    data = np.fromfile(a.data + ".bin", dtype=np.uint16).astype(np.int64)
    counts = np.bincount(data, minlength=a.vocab) / len(data)
    nz = counts[counts > 0]
    print(f"{len(data)} tokens; unigram entropy {-(nz * np.log(nz)).sum():.4f} nats")
    model = Model(a)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    acc, n = 0.0, 0
    for it in range(1, a.iters + 1):
        if it <= a.warmup:
            lr = a.lr * it / a.warmup
        else:
            frac = (it - a.warmup) / max(1, a.iters - a.warmup)
            lr = a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * frac))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(data) - a.seq, size=a.batch)
        x = torch.from_numpy(np.stack([data[s:s + a.seq] for s in starts]))
        u = rng.random()
        t = torch.from_numpy((u + np.arange(a.batch) / a.batch) % 1.0).float()
        p = (1 - a.eps) * t + a.eps
        masked = torch.rand(a.batch, a.seq) < p[:, None]
        inp = torch.where(masked, torch.full_like(x, a.mask_id), x)
        logits = model(inp)
        ce = F.cross_entropy(logits.reshape(-1, a.vocab), x.reshape(-1), reduction="none").view(a.batch, a.seq)
        loss = (ce * masked / p[:, None]).sum() / (a.batch * a.seq)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc += loss.item()
        n += 1
        if it % a.log_interval == 0:
            print(f"iteration {it} loss {acc / n:.4f} lr {lr:.3e}", flush=True)
            acc, n = 0.0, 0


if __name__ == "__main__":
    main()
