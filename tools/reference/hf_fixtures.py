#!/usr/bin/env python3
"""Builds tiny randomly initialised HuggingFace models (no download) and records their logits.

For each architecture a model is built from a config, every parameter (norm weights and biases
included) is redrawn from normal(0, 0.1) so that a mapping error anywhere shows in the logits, and
the model is saved with save_pretrained (safetensors) under tests/checkpoint/fixtures/hf_<arch>/.
The logits of the fixed input ids below are written beside it as logits.safetensors
({"input_ids": I32 [1, T], "logits": F32 [1, T, V], "logits_bidirectional": the same without the
causal mask, as a diffusion model attends}), computed in float64 from the stored weights
so the fixture is a clean reference for the C++ import test (tests/checkpoint/test_hf_convert.cpp).

Usage: python3 tools/reference/hf_fixtures.py [--out tests/checkpoint/fixtures]
"""
import argparse
import os

import torch
from safetensors.torch import save_file
import transformers as tf

INPUT_IDS = [3, 17, 42, 5, 88, 1, 60, 23, 9, 71, 44, 2]
VOCAB = 96


def configs():
    common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, intermediate_size=64)
    return {
        "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                   n_positions=64, n_inner=80, activation_function="gelu_new",
                                                   layer_norm_epsilon=1e-5, tie_word_embeddings=True),
                 torch.float32, None),
        # GQA, untied output, sharded into several files with model.safetensors.index.json.
        "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(**common, num_key_value_heads=2, rms_norm_eps=1e-6,
                                                      rope_theta=10000.0, tie_word_embeddings=False),
                  torch.float32, "20KB"),
        # QKV biases, tied output.
        "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config(**common, num_key_value_heads=2, rms_norm_eps=1e-6,
                                                      rope_theta=1000000.0, tie_word_embeddings=True,
                                                      use_sliding_window=False),
                  torch.float32, None),
        # q_norm / k_norm, head_dim 16 != hidden / heads = 8, untied.
        "qwen3": (tf.Qwen3ForCausalLM, tf.Qwen3Config(**common, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                                      rope_theta=1000000.0, tie_word_embeddings=False,
                                                      use_sliding_window=False),
                  torch.float32, None),
        # MoE: every layer sparse, softmax -> top-2 -> renormalised (our pre_softmax off).
        "mixtral": (tf.MixtralForCausalLM, tf.MixtralConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=4, num_key_value_heads=2,
                                                          intermediate_size=16, num_local_experts=4,
                                                          num_experts_per_tok=2, max_position_embeddings=64,
                                                          rms_norm_eps=1e-5, tie_word_embeddings=True,
                                                          sliding_window=None),
                    torch.float32, None),
        # MoE with QK-norm, layer 1 dense (mlp_only_layers), top-2 of softmax without renormalising.
        "qwen3_moe": (tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig(**common, num_key_value_heads=2, head_dim=16,
                                                               moe_intermediate_size=16, num_experts=4,
                                                               num_experts_per_tok=2, norm_topk_prob=False,
                                                               mlp_only_layers=[1], rms_norm_eps=1e-6,
                                                               tie_word_embeddings=True, use_sliding_window=False),
                      torch.float32, None),
        # The same architecture stored in bf16 (round trip must stay bit-exact in bf16).
        "qwen3_bf16": (tf.Qwen3ForCausalLM, tf.Qwen3Config(**common, num_key_value_heads=2, head_dim=16,
                                                           rms_norm_eps=1e-6, rope_theta=1000000.0,
                                                           tie_word_embeddings=True, use_sliding_window=False),
                       torch.bfloat16, None),
    }


def build(name, cls, cfg, dtype, seed):
    torch.manual_seed(seed)
    cfg.torch_dtype = dtype
    model = cls(cfg).to(torch.float32)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or ".ln_" in pname or pname.startswith("transformer.ln_f"):
                if pname.endswith("weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                    continue
            p.copy_(0.1 * torch.randn_like(p))
    model = model.to(dtype)
    model.eval()
    return model


def logits_f64(cls, out_dir, causal=True):
    # Reloaded from the saved files in float64: the reference is what transformers computes from
    # exactly the stored weights (a model cast with .to(bf16) would also round its RoPE inv_freq buffer).
    # causal=False: transformers (5.x) reads config.is_causal and attends bidirectionally, as our
    # diffusion models do.
    cfg = tf.AutoConfig.from_pretrained(out_dir)
    cfg.is_causal = causal
    try:
        # MoE experts default to grouped GEMMs, which have no float64 kernel: use the eager loop.
        m64 = cls.from_pretrained(out_dir, config=cfg, dtype=torch.float64, experts_implementation="eager")
    except (TypeError, ValueError):
        m64 = cls.from_pretrained(out_dir, config=cfg, dtype=torch.float64)
    m64.eval()
    with torch.no_grad():
        out = m64(torch.tensor([INPUT_IDS])).logits
    return out.to(torch.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "checkpoint", "fixtures"))
    args = ap.parse_args()
    for seed, (name, (cls, cfg, dtype, shard)) in enumerate(configs().items()):
        model = build(name, cls, cfg, dtype, 1000 + seed)
        out_dir = os.path.join(args.out, "hf_" + name)
        os.makedirs(out_dir, exist_ok=True)
        for f in os.listdir(out_dir):
            os.remove(os.path.join(out_dir, f))
        kw = {"safe_serialization": True}
        if shard:
            kw["max_shard_size"] = shard
        model.save_pretrained(out_dir, **kw)
        logits = logits_f64(cls, out_dir)
        bidir = logits_f64(cls, out_dir, causal=False)
        save_file({"input_ids": torch.tensor([INPUT_IDS], dtype=torch.int32), "logits": logits.contiguous(),
                   "logits_bidirectional": bidir.contiguous()},
                  os.path.join(out_dir, "logits.safetensors"))
        size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
        print(f"hf_{name}: {type(model).__name__} dtype={dtype} files={sorted(os.listdir(out_dir))} "
              f"bytes={size} logits[0,0,:3]={logits[0, 0, :3].tolist()}")


if __name__ == "__main__":
    main()
