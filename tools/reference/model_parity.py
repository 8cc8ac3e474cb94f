#!/usr/bin/env python3
"""Reference numbers for tests/models/test_parity.cpp.

Builds three tiny decoder language models with plain PyTorch code written here (no HuggingFace), with
exactly the semantics and parameter names of src/models/language_model.h, runs one forward and
backward on a fixed batch, and writes for each model a safetensors fixture holding

  param.<name>   float32   the model's parameters (the C++ test loads these into its ParamStore)
  grad.<name>    float32   d loss / d param
  batch.tokens, batch.positions, batch.targets   int32 [B, T]
  batch.weights  float32 [B, T]
  loss           float32 [1]

and the metadata {"config": <TransformerConfig fields as JSON>, "model_type": "gpt"|"difflm",
"B": "..", "T": ".."}.

Precision: the parameters are drawn in float32 and stored as float32; the reference forward and
backward run in float64 on those exact float32 values, and the results are rounded to float32 once
when stored. The C++ fp32 model is then compared against numbers that carry no fp32 error of their own.

Semantics (shared with the C++ model):
  Linear          y = x W^T + b, W stored [out, in]
  LayerNorm       (x - mean) / sqrt(var + eps) * w + b  (biased variance)
  RMSNorm         x / sqrt(mean(x^2) + eps) * w
  QK-norm         per-head RMSNorm over D of q and k (eps = norm_epsilon), before RoPE
  RoPE            rotate-half (HF LLaMA): theta_i(p) = p * base^(-2i/D) for i < D/2
  attention       softmax(q k^T / sqrt(D) + mask) v; GQA: query head h reads kv head h // (H / K)
  MLP             GELU (tanh approximation): fc2(gelu(fc1 x));
                  SwiGLU: fc1 rows [gate; up], fc2(silu(gate) * up)
  layer           pre-norm: x = x + attn(ln1(x)); x = x + mlp(ln2(x))
  model           embed_tokens (+ embed_positions) -> layers -> norm -> logits = x W_out^T
                  (W_out = embed_tokens.weight when tied, else lm_head.weight)
  loss            sum_n w_n * CE_n over targets != -100

Usage: python3 tools/reference/model_parity.py [--out tests/models/fixtures]
"""
import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file

B, T = 2, 7
IGNORE = -100


# ---- configurations -------------------------------------------------------------------------------
def base_config():
    return {
        "num_layers": 2,
        "hidden_size": 24,             # C
        "num_attention_heads": 4,      # H
        "num_query_groups": 4,         # K
        "kv_channels": 6,              # D
        "ffn_hidden_size": 40,         # F
        "vocab_size": 37,              # V
        "max_position_embeddings": 16,
        "normalization": "LayerNorm",  # LayerNorm | RMSNorm
        "norm_epsilon": 1e-5,
        "activation": "gelu",          # gelu | swiglu
        "add_bias_linear": True,
        "add_qkv_bias": False,
        "position_embedding": "learned_absolute",  # learned_absolute | rope | none
        "rotary_base": 10000.0,
        "qk_layernorm": False,
        "untie_embeddings_and_output_weights": False,
        "init_method_std": 0.02,
        "attention_mask": "causal",    # causal | no_mask | block_causal
        "attention_block_size": 0,
    }


def gpt2_config():
    return base_config()


def llama_config():
    c = base_config()
    c.update({
        "num_query_groups": 2,
        "normalization": "RMSNorm",
        "norm_epsilon": 1e-6,
        "activation": "swiglu",
        "add_bias_linear": False,
        "position_embedding": "rope",
        "qk_layernorm": True,
        "untie_embeddings_and_output_weights": True,
    })
    return c


def dlm_config():
    c = llama_config()
    c["attention_mask"] = "no_mask"
    return c


# ---- parameters: the same names and shapes as the C++ ParamStore -------------------------------------
def param_shapes(c):
    C, H, K, D, F, V = (c["hidden_size"], c["num_attention_heads"], c["num_query_groups"], c["kv_channels"],
                        c["ffn_hidden_size"], c["vocab_size"])
    ln = c["normalization"] == "LayerNorm"
    bias = c["add_bias_linear"]
    qkv_bias = bias or c["add_qkv_bias"]
    shapes = {"embed_tokens.weight": (V, C)}
    if c["position_embedding"] == "learned_absolute":
        shapes["embed_positions.weight"] = (c["max_position_embeddings"], C)

    def norm(name):
        shapes[name + ".weight"] = (C,)
        if ln:
            shapes[name + ".bias"] = (C,)

    def linear(name, i, o, b):
        shapes[name + ".weight"] = (o, i)
        if b:
            shapes[name + ".bias"] = (o,)

    for l in range(c["num_layers"]):
        p = f"layers.{l}"
        norm(p + ".input_layernorm")
        linear(p + ".self_attn.q_proj", C, H * D, qkv_bias)
        linear(p + ".self_attn.k_proj", C, K * D, qkv_bias)
        linear(p + ".self_attn.v_proj", C, K * D, qkv_bias)
        linear(p + ".self_attn.o_proj", H * D, C, bias)
        if c["qk_layernorm"]:
            shapes[p + ".self_attn.q_norm.weight"] = (D,)
            shapes[p + ".self_attn.k_norm.weight"] = (D,)
        norm(p + ".post_attention_layernorm")
        linear(p + ".mlp.fc1", C, 2 * F if c["activation"] == "swiglu" else F, bias)
        linear(p + ".mlp.fc2", F, C, bias)
    norm("norm")
    if c["untie_embeddings_and_output_weights"]:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def random_params(c, gen):
    """float32 values large enough that every nonlinearity is exercised (std 0.1-0.5, norm weights
    around 1 but not equal to it, nonzero biases)."""
    params = {}
    for name, shape in param_shapes(c).items():
        r = torch.randn(shape, generator=gen, dtype=torch.float64)
        if "norm" in name and name.endswith(".weight"):
            v = 1.0 + 0.2 * r
        elif name.endswith(".bias"):
            v = 0.1 * r
        elif name.startswith("embed_"):
            v = 0.5 * r
        else:
            v = 0.2 * r
        params[name] = v.to(torch.float32)
    return params


# ---- the reference model, float64 -------------------------------------------------------------------
def linear(x, p, name):
    y = x @ p[name + ".weight"].T
    if name + ".bias" in p:
        y = y + p[name + ".bias"]
    return y


def norm(x, p, name, c):
    eps = c["norm_epsilon"]
    if c["normalization"] == "LayerNorm":
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        y = (x - mean) / torch.sqrt(var + eps) * p[name + ".weight"]
        if name + ".bias" in p:
            y = y + p[name + ".bias"]
        return y
    return rmsnorm(x, p[name + ".weight"], eps)


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, positions, base):
    # x [B, T, heads, D], positions [B, T]
    D = x.shape[-1]
    half = D // 2
    inv_freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / D)
    ang = positions.to(torch.float64)[..., None] * inv_freq  # [B, T, D/2]
    cos, sin = torch.cos(ang)[:, :, None, :], torch.sin(ang)[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention_mask(c, Tn):
    i = torch.arange(Tn)[:, None]
    j = torch.arange(Tn)[None, :]
    kind = c["attention_mask"]
    if kind == "causal":
        return j <= i
    if kind == "no_mask":
        return torch.ones(Tn, Tn, dtype=torch.bool)
    if kind == "block_causal":
        bs = c["attention_block_size"]
        return (j // bs) <= (i // bs)
    raise ValueError(kind)


def self_attention(x, p, name, c, positions):
    Bn, Tn, _ = x.shape
    H, K, D = c["num_attention_heads"], c["num_query_groups"], c["kv_channels"]
    q = linear(x, p, name + ".q_proj").view(Bn, Tn, H, D)
    k = linear(x, p, name + ".k_proj").view(Bn, Tn, K, D)
    v = linear(x, p, name + ".v_proj").view(Bn, Tn, K, D)
    if c["qk_layernorm"]:
        q = rmsnorm(q, p[name + ".q_norm.weight"], c["norm_epsilon"])
        k = rmsnorm(k, p[name + ".k_norm.weight"], c["norm_epsilon"])
    if c["position_embedding"] == "rope":
        q = rope(q, positions, c["rotary_base"])
        k = rope(k, positions, c["rotary_base"])
    k = k.repeat_interleave(H // K, dim=2)  # query head h reads kv head h // (H/K)
    v = v.repeat_interleave(H // K, dim=2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, D]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    scores = scores.masked_fill(~attention_mask(c, Tn), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # [B, H, T, D]
    out = out.transpose(1, 2).reshape(Bn, Tn, H * D)
    return linear(out, p, name + ".o_proj")


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def mlp(x, p, name, c):
    h = linear(x, p, name + ".fc1")
    if c["activation"] == "swiglu":
        F = c["ffn_hidden_size"]
        gate, up = h[..., :F], h[..., F:]
        a = gate * torch.sigmoid(gate) * up
    else:
        a = gelu_tanh(h)
    return linear(a, p, name + ".fc2")


def model_loss(p, c, tokens, positions, targets, weights):
    x = p["embed_tokens.weight"][tokens.long()]
    if c["position_embedding"] == "learned_absolute":
        x = x + p["embed_positions.weight"][positions.long()]
    for l in range(c["num_layers"]):
        name = f"layers.{l}"
        x = x + self_attention(norm(x, p, name + ".input_layernorm", c), p, name + ".self_attn", c, positions)
        x = x + mlp(norm(x, p, name + ".post_attention_layernorm", c), p, name + ".mlp", c)
    x = norm(x, p, "norm", c)
    w_out = p["lm_head.weight"] if c["untie_embeddings_and_output_weights"] else p["embed_tokens.weight"]
    logits = (x @ w_out.T).reshape(-1, c["vocab_size"])
    t = targets.reshape(-1).long()
    valid = t != IGNORE
    ce = torch.logsumexp(logits, dim=-1) - logits.gather(1, t.clamp(min=0)[:, None])[:, 0]
    return (weights.reshape(-1).to(torch.float64) * ce * valid).sum()


def self_check():
    """The hand-written pieces above against torch.nn.functional's own, on random float64 inputs."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    w, b = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    c = {"normalization": "LayerNorm", "norm_epsilon": 1e-5}
    assert torch.allclose(norm(x, {"n.weight": w, "n.bias": b}, "n", c), F.layer_norm(x, (8,), w, b, 1e-5))
    assert torch.allclose(rmsnorm(x, w, 1e-6), F.rms_norm(x, (8,), w, 1e-6))
    assert torch.allclose(gelu_tanh(x), F.gelu(x, approximate="tanh"))
    # Attention with GQA (H = 4, K = 2) and each mask, against scaled_dot_product_attention.
    Bn, Tn, H, K, D = 2, 5, 4, 2, 6
    q = torch.randn(Bn, H, Tn, D, generator=g, dtype=torch.float64)
    k = torch.randn(Bn, K, Tn, D, generator=g, dtype=torch.float64)
    v = torch.randn(Bn, K, Tn, D, generator=g, dtype=torch.float64)
    for kind in ("causal", "no_mask", "block_causal"):
        cfg = {"attention_mask": kind, "attention_block_size": 2}
        mask = attention_mask(cfg, Tn)
        kk, vv = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
        scores = (q @ kk.transpose(-1, -2)) / math.sqrt(D)
        ours = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ vv
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        assert torch.allclose(ours, ref), kind
    # RoPE at position 0 is the identity, and it preserves the norm of each head vector.
    xr = torch.randn(2, 3, 4, 6, generator=g, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2], [5, 9, 15]])
    yr = rope(xr, pos, 10000.0)
    assert torch.allclose(yr[0, 0], xr[0, 0])
    assert torch.allclose(yr.norm(dim=-1), xr.norm(dim=-1))


# ---- batches ------------------------------------------------------------------------------------------
def ar_batch(c, gen, position_offsets, ignored):
    """Next-token targets: inputs seq[:T], targets seq[1:]; `ignored` lists (b, t) set to -100.
    weights = 1 / (number of counted targets), so the loss is a mean."""
    V = c["vocab_size"]
    seq = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    tokens = seq[:, :T].clone()
    targets = seq[:, 1:].clone()
    for b, t in ignored:
        targets[b, t] = IGNORE
    positions = torch.arange(T)[None, :] + torch.tensor(position_offsets)[:, None]
    count = int((targets != IGNORE).sum())
    weights = torch.full((B, T), 1.0 / count, dtype=torch.float32)
    return tokens, positions, targets, weights


def dlm_batch(c, gen, masked_positions, p_mask, mask_token):
    """Masked diffusion on a given set of masked positions per sequence (drawn with rate about p_b):
    inputs carry mask_token there, targets are the original tokens there and -100 elsewhere;
    weights = 1 / (p_b * B * T)."""
    V = c["vocab_size"]
    orig = torch.randint(0, V - 1, (B, T), generator=gen, dtype=torch.int64)  # mask_token never in data
    masked = torch.zeros((B, T), dtype=torch.bool)
    for b, ts in enumerate(masked_positions):
        masked[b, ts] = True
    tokens = torch.where(masked, torch.full_like(orig, mask_token), orig)
    targets = torch.where(masked, orig, torch.full_like(orig, IGNORE))
    positions = torch.arange(T)[None, :].expand(B, T).clone()
    weights = (1.0 / (torch.tensor(p_mask, dtype=torch.float64) * B * T))[:, None].expand(B, T)
    return tokens, positions, targets, weights.to(torch.float32).contiguous()


# ---- one fixture ----------------------------------------------------------------------------------------
def make_fixture(path, c, model_type, seed, batch_fn):
    gen = torch.Generator().manual_seed(seed)
    params32 = random_params(c, gen)
    tokens, positions, targets, weights = batch_fn(c, gen)
    p64 = {k: v.to(torch.float64).requires_grad_(True) for k, v in params32.items()}
    loss = model_loss(p64, c, tokens, positions, targets, weights)
    loss.backward()
    tensors = {}
    for name, v in params32.items():
        tensors["param." + name] = v.contiguous()
        tensors["grad." + name] = p64[name].grad.to(torch.float32).contiguous()
    tensors["batch.tokens"] = tokens.to(torch.int32).contiguous()
    tensors["batch.positions"] = positions.to(torch.int32).contiguous()
    tensors["batch.targets"] = targets.to(torch.int32).contiguous()
    tensors["batch.weights"] = weights.to(torch.float32).contiguous()
    tensors["loss"] = torch.tensor([loss.item()], dtype=torch.float32)
    metadata = {"config": json.dumps(c), "model_type": model_type, "B": str(B), "T": str(T)}
    save_file(tensors, path, metadata=metadata)
    print(f"{path}: loss {loss.item():.6f}, {sum(v.numel() for v in params32.values())} parameters, "
          f"{os.path.getsize(path)} bytes")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "..", "tests", "models", "fixtures")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    self_check()

    make_fixture(os.path.join(args.out, "parity_gpt2.safetensors"), gpt2_config(), "gpt", 1234,
                 lambda c, g: ar_batch(c, g, position_offsets=[0, 0], ignored=[(1, 3)]))
    make_fixture(os.path.join(args.out, "parity_llama.safetensors"), llama_config(), "gpt", 2345,
                 lambda c, g: ar_batch(c, g, position_offsets=[0, 5], ignored=[(0, T - 1)]))
    make_fixture(os.path.join(args.out, "parity_dlm.safetensors"), dlm_config(), "difflm", 3456,
                 lambda c, g: dlm_batch(c, g, masked_positions=[[0, 3, 5], [1, 2, 4, 5, 6]],
                                         p_mask=[0.3, 0.7], mask_token=36))


if __name__ == "__main__":
    main()
