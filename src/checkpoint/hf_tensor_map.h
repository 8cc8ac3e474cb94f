#pragma once
// Our parameter names and shapes <-> HuggingFace tensors, per layout:
//   gpt2   GPT2LMHeadModel     transformer.wte/wpe, h.N.ln_1/ln_2, attn.c_attn (fused QKV) / c_proj,
//                              mlp.c_fc / c_proj as Conv1D ([in, out]: transposed), ln_f; tied head
//   llama  LlamaForCausalLM    model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
//                              post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head
//   qwen2  Qwen2ForCausalLM    llama + q/k/v biases (our add_qkv_bias)
//   qwen3  Qwen3ForCausalLM    llama + self_attn.{q,k}_norm (our qk_layernorm), head_dim free (kv_channels)
//   llada  LLaDAModelLM        model.transformer.{wte, ln_f, ff_out}, blocks.N.{attn_norm, q_proj, k_proj,
//                              v_proj, attn_out, ff_norm, ff_proj (gate), up_proj, ff_out}
//   mixtral    MixtralForCausalLM   llama + block_sparse_moe.{gate, experts.E.{w1 (gate), w3 (up), w2 (down)}}
//   qwen3_moe  Qwen3MoeForCausalLM  qwen3 + mlp.{gate, experts.E.{gate,up,down}_proj} (mlp_only_layers dense)
// Our fc1 holds [gate; up] rows; fc2 is down_proj. Every tensor of ours is a concatenation of row
// ranges of (possibly transposed) HF tensors (the pieces below), so import and export (hf_convert.h)
// are exact inverses.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "core/tensor.h"
#include "nn/transformer_config.h"

namespace megadlm {

// Rows [row0, row0 + rows) of the HF tensor `hf` (viewed as 2-D [R, cols], after a transpose when
// `transpose`) form the next rows of our tensor.
struct Piece {
  std::string hf;
  bool transpose = false;
  int64_t row0 = 0, rows = 0;
};

// The HF pieces that make up our tensor `name` of `rows` rows.
std::vector<Piece> pieces_for(HfLayout l, const TransformerConfig& c, const std::string& name, int64_t rows);

// HF tensors that are buffers, not parameters, and may be skipped on import.
bool ignorable(const std::string& hf);

// Element (r, k) of an HF tensor viewed as [R, K] after an optional transpose, as float.
float hf_at(const Tensor& t, bool transpose, int64_t r, int64_t k, int64_t K);
// The same element written from a float, converted to the tensor's dtype (F32, BF16 or F16).
void hf_set(Tensor& t, bool transpose, int64_t r, int64_t k, int64_t K, float v);

}  // namespace megadlm
