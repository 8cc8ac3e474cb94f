#!/usr/bin/env python3
"""PyTorch peer of bench/cuda/bench_dlm_step.cpp: the same Qwen3-like diffusion LM (RMSNorm, QK-norm, RoPE,
GQA, SwiGLU, tied embeddings, bidirectional attention), the same masked-diffusion loss and batch shape,
trained with bf16 autocast over fp32 parameters and fused AdamW. Attention is SDPA restricted to the
flash backend; each transformer block is wrapped in torch.compile (one compilation, shared by the 28
blocks). Prints one RESULT line in the format of the C++ benchmark, with MFU against the bf16 matmul rate
torch measures in the same process.

    python tools/reference/gpu_peer_dlm.py [--layers 28 --hidden 2048 --heads 16 --kv-heads 8 --ffn 6144
                                            --vocab 151936 --seq 2048 --batch 4 --steps 5 --warmup 2]
                                           [--no-compile]
Needs a CUDA device and PyTorch >= 2.4 (runs offline: no downloads).
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in [("layers", 28), ("hidden", 2048), ("heads", 16), ("kv-heads", 8), ("head-dim", 128),
                          ("ffn", 6144), ("vocab", 151936), ("seq", 2048), ("batch", 4), ("steps", 5),
                          ("warmup", 2), ("gemm-size", 8192)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--no-compile", action="store_true", help="eager mode (no torch.compile)")
    return p.parse_args()


def rope_tables(T, D, base, device):
    inv = base ** (-torch.arange(0, D // 2, dtype=torch.float64, device=device) * 2.0 / D)
    ang = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    # x [B, T, H, D], rotate-half convention (HF LLaMA / Qwen).
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, H, K, D, Fh = a.hidden, a.heads, a.kv_heads, a.head_dim, a.ffn
        self.H, self.K, self.D = H, K, D
        self.ln1 = nn.Parameter(torch.ones(C))
        self.ln2 = nn.Parameter(torch.ones(C))
        self.qn = nn.Parameter(torch.ones(D))
        self.kn = nn.Parameter(torch.ones(D))
        self.wq = nn.Linear(C, H * D, bias=False)
        self.wk = nn.Linear(C, K * D, bias=False)
        self.wv = nn.Linear(C, K * D, bias=False)
        self.wo = nn.Linear(H * D, C, bias=False)
        self.w1 = nn.Linear(C, 2 * Fh, bias=False)  # gate and up, fused as Megatron's fc1
        self.w2 = nn.Linear(Fh, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = F.rms_norm(x, (C,), self.ln1, 1e-6)
        q = F.rms_norm(self.wq(h).view(B, T, self.H, self.D), (self.D,), self.qn, 1e-6)
        k = F.rms_norm(self.wk(h).view(B, T, self.K, self.D), (self.D,), self.kn, 1e-6)
        v = self.wv(h).view(B, T, self.K, self.D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.K != self.H:  # GQA: repeat kv heads (the flash backend takes equal head counts)
            k, v = k.repeat_interleave(self.H // self.K, dim=2), v.repeat_interleave(self.H // self.K, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False)
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, self.H * self.D))
        g, u = self.w1(F.rms_norm(x, (C,), self.ln2, 1e-6)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.hidden)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.lnf = nn.Parameter(torch.ones(a.hidden))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.uniform_(p, -0.02 * math.sqrt(3), 0.02 * math.sqrt(3))

    def forward(self, tokens, cos, sin, blocks):
        x = self.wte(tokens)
        for blk in blocks:
            x = blk(x, cos, sin)
        x = F.rms_norm(x, (x.shape[-1],), self.lnf, 1e-6)
        return x @ self.wte.weight.t().to(x.dtype)  # tied LM head


def bf16_gemm_tflops(n):
    a = torch.full((n, n), 0.0115, device="cuda", dtype=torch.bfloat16)
    b = torch.full((n, n), 0.0115, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b.t()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    e0.record()
    for _ in range(reps):
        a @ b.t()
    e1.record()
    torch.cuda.synchronize()
    return 2.0 * n ** 3 / (e0.elapsed_time(e1) / reps * 1e-3) / 1e12


def main():
    a = parse()
    if not torch.cuda.is_available():
        print("gpu_peer_dlm: no CUDA device; nothing to measure")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name()}")
    peak = bf16_gemm_tflops(a.gemm_size)
    print(f"bf16 torch.matmul {a.gemm_size}^3: {peak:.1f} TFLOP/s (the MFU denominator)")
    torch.manual_seed(0)
    model = Model(a).to(dev)
    blocks = [torch.compile(b) for b in model.blocks] if not a.no_compile else list(model.blocks)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    cos, sin = rope_tables(a.seq, a.head_dim, 1e6, dev)
    N = a.batch * a.seq
    n_params = sum(p.numel() for p in model.parameters())
    embed = a.vocab * a.hidden
    gen = torch.Generator(device=dev).manual_seed(42)
    mask_id = a.vocab - 1

    def batch():
        x = torch.randint(0, a.vocab - 1, (a.batch, a.seq), device=dev, generator=gen)
        t = 0.05 + 0.95 * torch.rand(a.batch, 1, device=dev, generator=gen)
        masked = torch.rand(a.batch, a.seq, device=dev, generator=gen) < t
        tokens = torch.where(masked, torch.full_like(x, mask_id), x)
        targets = torch.where(masked, x, torch.full_like(x, -100))
        return tokens, targets, (1.0 / t).expand(a.batch, a.seq)

    def step():
        tokens, targets, w = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            logits = model(tokens, cos, sin, blocks)
        losses = F.cross_entropy(logits.float().view(N, -1), targets.view(N), ignore_index=-100, reduction="none")
        loss = (losses * w.reshape(N)).sum() / N
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times = []
    t_compile = time.time()
    for i in range(a.warmup + a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        loss = step()
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1)
        print(f"step {i + 1}: loss {loss.item():.4f}  {ms:.1f} ms{'  (warm-up)' if i < a.warmup else ''}")
        if i >= a.warmup:
            times.append(ms)
        if i == a.warmup - 1:
            print(f"warm-up (compilation included) took {time.time() - t_compile:.0f} s")
    step_ms = sum(times) / len(times)
    tok_s = N / (step_ms * 1e-3)
    flops_tok = 6.0 * n_params + 12.0 * a.layers * a.seq * a.heads * a.head_dim  # the C++ bench's formula
    tflops = flops_tok * tok_s / 1e12
    print(f"RESULT pytorch: {step_ms:.1f} ms/step, {tok_s:.0f} tokens/s, {tflops:.1f} model TFLOP/s, "
          f"MFU {100 * tflops / peak:.1f}% of the measured bf16 GEMM rate ({peak:.1f} TFLOP/s); "
          f"{n_params / 1e9:.3f} B parameters ({(n_params - embed) / 1e9:.3f} B without the tied embedding)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
