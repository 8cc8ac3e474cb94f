#!/usr/bin/env python3
"""Reference numbers for tests/models/test_bd3_parity.cpp: the BD3-LM (block diffusion) loss.

A tiny LLaMA-style model of our architecture (the PyTorch model of tools/reference/model_parity.py, the
same parameter names and semantics) with a block_causal mask of block L' = BLOCK. Fixed clean tokens
x_0 [B, T], fixed noise levels t [B, T / L'] per block and fixed mask decisions [B, T] define x_t
(the masked positions carry the mask token). The BD3-LM loss is

    loss = 1 / (B T) * sum_rows sum_blocks b sum_{i in b masked} -log p(x_0[i] | x_t[block b], x_0[blocks < b]) / t_b

Here each block's conditional is computed SEQUENTIALLY, as the paper defines it and as a sampler runs
it: for block b the model reads [x_0 blocks 0..b-1 ; x_t block b] (positions 0..(b+1)L'-1) under the
plain block_causal mask, one forward per block. The C++ objective computes the same loss with ONE
forward over the vectorised layout [x_t ; x_0] (2T rows) under MaskType::BlockDiffusion; the two agree
because noised block b sees exactly itself and the clean blocks before it in both. A self-check below
also evaluates the vectorised layout in PyTorch (its own 2T mask) and asserts that both agree.

Precision as model_parity.py: float32 parameters, the reference in float64, results stored float32.
Writes tests/models/fixtures/bd3_parity.safetensors with
  param.<name>, grad.<name>  float32
  bd3.x0 int32 [B, T], bd3.t float32 [B, T / L'] (dyadic, exact), bd3.masked int32 [B, T]
  loss float32 [1]
and the metadata {"config": ..., "B", "T", "block_length", "mask_token"}.

Usage: python3 tools/reference/bd3_reference.py [--out tests/models/fixtures]
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_parity as mp  # noqa: E402  the float64 model of our architecture

B, T, BLOCK = 2, 8, 2
MASK_TOKEN = 36


def config():
    c = mp.llama_config()  # GQA, RoPE, RMSNorm, SwiGLU, QK-norm, untied output
    c["attention_mask"] = "block_causal"
    c["attention_block_size"] = BLOCK
    return c


def logits_of(p, c, tokens, positions):
    """The model's logits [B, n, V] (mp.model_loss's forward, without the loss)."""
    x = p["embed_tokens.weight"][tokens.long()]
    if c["position_embedding"] == "learned_absolute":
        x = x + p["embed_positions.weight"][positions.long()]
    for l in range(c["num_layers"]):
        name = f"layers.{l}"
        x = x + mp.self_attention(mp.norm(x, p, name + ".input_layernorm", c), p, name + ".self_attn", c, positions)
        x = x + mp.mlp(mp.norm(x, p, name + ".post_attention_layernorm", c), p, name + ".mlp", c)
    x = mp.norm(x, p, "norm", c)
    w_out = p["lm_head.weight"] if c["untie_embeddings_and_output_weights"] else p["embed_tokens.weight"]
    return x @ w_out.T


def ce(logits, target):
    return torch.logsumexp(logits, dim=-1) - logits.gather(-1, target[..., None].long())[..., 0]


def noised(x0, masked):
    return torch.where(masked, torch.full_like(x0, MASK_TOKEN), x0)


def bd3_loss_sequential(p, c, x0, t, masked):
    """One forward per block over [x_0 blocks < b ; x_t block b] with the block_causal mask."""
    xt = noised(x0, masked)
    total = torch.zeros((), dtype=torch.float64)
    for b in range(T // BLOCK):
        lo, hi = b * BLOCK, (b + 1) * BLOCK
        seq = torch.cat([x0[:, :lo], xt[:, lo:hi]], dim=1)
        pos = torch.arange(hi)[None, :].expand(B, hi)
        lg = logits_of(p, c, seq, pos)[:, lo:hi]
        w = masked[:, lo:hi].to(torch.float64) / t[:, b:b + 1]
        total = total + (ce(lg, x0[:, lo:hi]) * w).sum()
    return total / (B * T)


def bd3_mask_2t():
    """The vectorised layout's mask, written from the paper's three parts (M_BD, M_OBC, M_BC)."""
    n = 2 * T
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    qi_clean, kj_clean = i >= T, j >= T
    bq, bk = (i % T) // BLOCK, (j % T) // BLOCK
    m_bd = ~qi_clean & ~kj_clean & (bq == bk)
    m_obc = ~qi_clean & kj_clean & (bk < bq)
    m_bc = qi_clean & kj_clean & (bk <= bq)
    return m_bd | m_obc | m_bc


def bd3_loss_vectorised(p, c, x0, t, masked):
    """The same loss with one forward over [x_t ; x_0]: a self-check of the sequential form."""
    orig = mp.attention_mask
    mp.attention_mask = lambda cfg, Tn: bd3_mask_2t()
    try:
        seq = torch.cat([noised(x0, masked), x0], dim=1)
        pos = torch.cat([torch.arange(T), torch.arange(T)])[None, :].expand(B, 2 * T)
        lg = logits_of(p, c, seq, pos)[:, :T]
    finally:
        mp.attention_mask = orig
    w = masked.to(torch.float64) / t.repeat_interleave(BLOCK, dim=1)
    return (ce(lg, x0) * w).sum() / (B * T)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "..", "tests", "models", "fixtures")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    mp.self_check()

    c = config()
    gen = torch.Generator().manual_seed(4567)
    params32 = mp.random_params(c, gen)
    x0 = torch.randint(0, c["vocab_size"] - 1, (B, T), generator=gen, dtype=torch.int64)  # never the mask token
    # Dyadic levels: exact in float32, the stored dtype.
    t = torch.tensor([[0.3125, 0.75, 0.5, 0.875], [0.4375, 0.125, 0.625, 0.8125]], dtype=torch.float64)
    masked = torch.rand((B, T), generator=gen, dtype=torch.float64) < t.repeat_interleave(BLOCK, dim=1)
    masked[0, 0] = True  # at least one masked token in the first block of each row
    masked[1, 1] = True

    p64 = {k: v.to(torch.float64).requires_grad_(True) for k, v in params32.items()}
    loss = bd3_loss_sequential(p64, c, x0, t, masked)
    loss.backward()
    with torch.no_grad():
        vec = bd3_loss_vectorised({k: v.detach() for k, v in p64.items()}, c, x0, t, masked)
    assert abs(vec.item() - loss.item()) <= 1e-12 * abs(loss.item()), (vec.item(), loss.item())

    tensors = {}
    for name, v in params32.items():
        tensors["param." + name] = v.contiguous()
        tensors["grad." + name] = p64[name].grad.to(torch.float32).contiguous()
    tensors["bd3.x0"] = x0.to(torch.int32).contiguous()
    tensors["bd3.t"] = t.to(torch.float32).contiguous()
    tensors["bd3.masked"] = masked.to(torch.int32).contiguous()
    tensors["loss"] = torch.tensor([loss.item()], dtype=torch.float32)
    meta = {"config": json.dumps(c), "B": str(B), "T": str(T), "block_length": str(BLOCK),
            "mask_token": str(MASK_TOKEN)}
    path = os.path.join(args.out, "bd3_parity.safetensors")
    save_file(tensors, path, metadata=meta)
    print(f"{path}: loss {loss.item():.8f} (vectorised {vec.item():.8f}), masked {int(masked.sum())} of {B * T}")


if __name__ == "__main__":
    main()
