#!/usr/bin/env python3
"""PyTorch reference trainer for bench/compare_pytorch: the same models, batch and optimizer as
build/bin/pretrain_difflm, timed the same way, so that tokens/s can be compared side by side.

Models (shapes in bench/compare_pytorch/compare.py):
  gpt2  - learned positions, LayerNorm, biased linears, GELU (tanh) MLP of 4C, tied embeddings;
  llama - RoPE (rotate-half, base 10000), RMSNorm, no biases, SwiGLU MLP, untied output layer.
Objectives:
  ar  - causal attention, next-token cross-entropy;
  dlm - bidirectional attention, LLaDA masked-diffusion loss: per sequence t ~ U(0, 1),
        p = (1 - eps) t + eps, each token masked (replaced by the mask id) with probability p, loss =
        sum over masked tokens of CE / p, divided by B*T.
Training: AdamW (lr 3e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on matrices only), gradient
clipping at 1.0, one micro-batch per step. Precision: fp32, or bf16 through torch.autocast("cpu").
Prints one JSON line (prefixed "RESULT ") with the timed tokens/s and the process's peak RSS.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(T, D, base):
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)  # [T, D/2]
    ang = torch.cat([ang, ang], dim=-1)  # [T, D]
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):  # x [B, H, T, D]
    d = x.shape[-1] // 2
    rot = torch.cat([-x[..., d:], x[..., :d]], dim=-1)
    return x * cos + rot * sin


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, F_ = cfg["hidden"], cfg["ffn"]
        self.H = cfg["heads"]
        self.llama = cfg["style"] == "llama"
        bias = not self.llama
        norm = (lambda: RMSNorm(C, 1e-5)) if self.llama else (lambda: nn.LayerNorm(C, eps=1e-5))
        self.ln1, self.ln2 = norm(), norm()
        self.qkv = nn.Linear(C, 3 * C, bias=bias)
        self.proj = nn.Linear(C, C, bias=bias)
        self.fc = nn.Linear(C, 2 * F_ if self.llama else F_, bias=bias)  # SwiGLU: gate and up fused
        self.fc2 = nn.Linear(F_, C, bias=bias)

    def forward(self, x, causal, rope):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        h = self.fc(self.ln2(x))
        if self.llama:
            g, u = h.chunk(2, dim=-1)
            h = F.silu(g) * u
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc2(h)


class LM(nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        C, V = cfg["hidden"], cfg["vocab"]
        self.llama = cfg["style"] == "llama"
        self.wte = nn.Embedding(V, C)
        self.wpe = None if self.llama else nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.ln_f = RMSNorm(C, 1e-5) if self.llama else nn.LayerNorm(C, eps=1e-5)
        self.head = nn.Linear(C, V, bias=False)
        if not self.llama:
            self.head.weight = self.wte.weight  # tied
        cos, sin = rope_tables(T, C // cfg["heads"], 10000.0)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, causal, rows=None):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe.weight[:T]
        rope = (self.cos[:T], self.sin[:T]) if self.llama else None
        for blk in self.blocks:
            x = blk(x, causal, rope)
        h = self.ln_f(x)
        if rows is not None:  # only these rows of the flattened [B*T, C] go through the output layer
            return self.head(h.reshape(B * T, -1)[rows])  # [rows, V]
        return self.head(h)  # [B, T, V]


def ar_loss(model, tokens):
    logits = model(tokens[:, :-1], True)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def dlm_loss(model, tokens, mask_id, eps, gen, masked_logits):
    x = tokens[:, :-1]
    B, T = x.shape
    t = torch.rand(B, 1, generator=gen)
    p = (1 - eps) * t + eps
    masked = torch.rand(B, T, generator=gen) < p
    noisy = torch.where(masked, torch.full_like(x, mask_id), x)
    if masked_logits:  # the output layer on the masked rows only (as pretrain_difflm does)
        rows = masked.reshape(-1)
        logits = model(noisy, False, rows)
        ce = F.cross_entropy(logits.float(), x.reshape(-1)[rows], reduction="none")
        return (ce / p.expand(B, T).reshape(-1)[rows]).sum() / (B * T)
    logits = model(noisy, False)
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x.reshape(-1), reduction="none").view(B, T)
    return (ce * masked / p).sum() / (B * T)


def load_tokens(prefix):
    """Token ids of a Megatron MMIDIDX dataset (<prefix>.bin), dtype from the .idx header."""
    with open(prefix + ".idx", "rb") as f:
        head = f.read(18)
    assert head[:9] == b"MMIDIDX\x00\x00", prefix + ".idx: not an MMIDIDX index"
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[head[17]]
    return np.fromfile(prefix + ".bin", dtype=dtype).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="JSON model config: style, layers, hidden, heads, ffn, vocab")
    ap.add_argument("--objective", choices=["ar", "dlm"], required=True)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--seq-length", type=int, required=True)
    ap.add_argument("--micro-batch-size", type=int, required=True)
    ap.add_argument("--data", default="", help="MMIDIDX prefix (empty: uniform random tokens)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps (compilation happens here)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--masked-logits", action="store_true",
                    help="dlm: run the output layer on the masked rows only (default: all rows, as LLaDA's code)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = json.loads(a.config)
    T, B = a.seq_length, a.micro_batch_size
    model = LM(cfg, T)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kw = dict(lr=3e-4, betas=(0.9, 0.999), eps=1e-8)
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, fused=True, **opt_kw)  # the fastest CPU AdamW where available
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, **opt_kw)

    rng = np.random.default_rng(a.seed)
    data = load_tokens(a.data) if a.data else None
    mask_id = cfg["vocab_real"]  # a new token after the tokenizer's, as pretrain_difflm adds
    gen = torch.Generator().manual_seed(a.seed)

    def batch():
        if data is None:
            return torch.from_numpy(rng.integers(0, cfg["vocab_real"], size=(B, T + 1)))
        starts = rng.integers(0, len(data) - T - 1, size=B)
        return torch.from_numpy(np.stack([data[s : s + T + 1] for s in starts]))

    loss_fn = ar_loss if a.objective == "ar" else (lambda m, tok: dlm_loss(m, tok, mask_id, 1e-3, gen, a.masked_logits))
    fwd = model
    if a.mode == "compile":
        fwd = torch.compile(model)

    def step():
        tokens = batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(fwd, tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        loss = step()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    total = sum(times)
    out = {
        "tokens_per_s": B * T * len(times) / total,
        "step_s_mean": total / len(times),
        "step_s_min": min(times),
        "warmup_s": warm_s,
        "final_loss": loss,
        "params": sum(p.numel() for p in model.parameters()),
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    print("RESULT " + json.dumps(out), flush=True)
    if not math.isfinite(loss):
        sys.exit(1)


if __name__ == "__main__":
    main()
