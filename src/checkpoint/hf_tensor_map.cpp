// The tensor mapping between our parameters and HuggingFace tensors: the pieces of each parameter
// per layout, and element access to HF tensors (transposed or not, F32 / BF16 / F16).
#include "checkpoint/hf_tensor_map.h"

#include "core/dtype.h"
#include "core/error.h"

namespace megadlm {

namespace {

// Our name "layers.N.rest" -> (N, rest); false for non-layer names.
bool split_layer(const std::string& name, int64_t& layer, std::string& rest) {
  if (name.rfind("layers.", 0) != 0) return false;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos) return false;
  layer = std::stoll(name.substr(7, dot - 7));
  rest = name.substr(dot + 1);
  return true;
}

}  // namespace

std::vector<Piece> pieces_for(HfLayout l, const TransformerConfig& c, const std::string& name, int64_t rows) {
  const std::string where = std::string("layout ") + hf_layout_name(l);
  const int64_t F = c.ffn_hidden_size;
  int64_t n = -1;
  std::string rest;
  const bool in_layer = split_layer(name, n, rest);
  const std::string N = std::to_string(n);
  auto whole = [&](const std::string& hf, bool tr = false) { return std::vector<Piece>{{hf, tr, 0, rows}}; };
  auto ends_with = [](const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  const std::string suffix = ends_with(name, ".bias") ? "bias" : "weight";
  if (l == HfLayout::GPT2) {
    if (name == "embed_tokens.weight") return whole("transformer.wte.weight");
    if (name == "embed_positions.weight") return whole("transformer.wpe.weight");
    if (name == "norm.weight" || name == "norm.bias") return whole("transformer.ln_f." + suffix);
    if (name == "lm_head.weight") return whole("lm_head.weight");
    if (in_layer) {
      const std::string p = "transformer.h." + N + ".";
      const bool w = suffix == "weight";
      const int64_t C = c.hidden_size;
      if (rest.rfind("input_layernorm.", 0) == 0) return whole(p + "ln_1." + suffix);
      if (rest.rfind("post_attention_layernorm.", 0) == 0) return whole(p + "ln_2." + suffix);
      if (rest.rfind("self_attn.q_proj.", 0) == 0) return {{p + "attn.c_attn." + suffix, w, 0, C}};
      if (rest.rfind("self_attn.k_proj.", 0) == 0) return {{p + "attn.c_attn." + suffix, w, C, C}};
      if (rest.rfind("self_attn.v_proj.", 0) == 0) return {{p + "attn.c_attn." + suffix, w, 2 * C, C}};
      if (rest.rfind("self_attn.o_proj.", 0) == 0) return whole(p + "attn.c_proj." + suffix, w);
      if (rest.rfind("mlp.fc1.", 0) == 0) return whole(p + "mlp.c_fc." + suffix, w);
      if (rest.rfind("mlp.fc2.", 0) == 0) return whole(p + "mlp.c_proj." + suffix, w);
    }
  } else if (l == HfLayout::LLaDA) {
    if (name == "embed_tokens.weight") return whole("model.transformer.wte.weight");
    if (name == "norm.weight") return whole("model.transformer.ln_f.weight");
    if (name == "lm_head.weight") return whole("model.transformer.ff_out.weight");
    if (in_layer) {
      const std::string p = "model.transformer.blocks." + N + ".";
      if (rest == "input_layernorm.weight") return whole(p + "attn_norm.weight");
      if (rest == "post_attention_layernorm.weight") return whole(p + "ff_norm.weight");
      for (const char* q : {"q_proj", "k_proj", "v_proj"})
        if (rest.rfind(std::string("self_attn.") + q + ".", 0) == 0) return whole(p + q + "." + suffix);
      if (rest.rfind("self_attn.o_proj.", 0) == 0) return whole(p + "attn_out." + suffix);
      if (rest.rfind("mlp.fc1.", 0) == 0) return {{p + "ff_proj." + suffix, false, 0, F}, {p + "up_proj." + suffix, false, 0, F}};
      if (rest.rfind("mlp.fc2.", 0) == 0) return whole(p + "ff_out." + suffix);
    }
  } else {
    if (name == "embed_tokens.weight") return whole("model.embed_tokens.weight");
    if (name == "norm.weight") return whole("model.norm.weight");
    if (name == "lm_head.weight") return whole("lm_head.weight");
    if (in_layer) {
      const std::string p = "model.layers." + N + ".";
      if (rest == "mlp.router.weight")
        return whole(p + (l == HfLayout::Mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"));
      if (rest.rfind("mlp.experts.", 0) == 0) {
        // mlp.experts.E.fc1.weight / fc2.weight
        const size_t dot = rest.find('.', 12);
        const std::string E = rest.substr(12, dot - 12), what = rest.substr(dot + 1);
        const int64_t half = rows / 2;
        if (l == HfLayout::Mixtral) {
          const std::string q = p + "block_sparse_moe.experts." + E + ".";
          if (what == "fc1.weight") return {{q + "w1.weight", false, 0, half}, {q + "w3.weight", false, 0, half}};
          if (what == "fc2.weight") return whole(q + "w2.weight");
        } else {
          const std::string q = p + "mlp.experts." + E + ".";
          if (what == "fc1.weight") return {{q + "gate_proj.weight", false, 0, half}, {q + "up_proj.weight", false, 0, half}};
          if (what == "fc2.weight") return whole(q + "down_proj.weight");
        }
      }
      if (rest.rfind("mlp.fc1.", 0) == 0)
        return {{p + "mlp.gate_proj." + suffix, false, 0, F}, {p + "mlp.up_proj." + suffix, false, 0, F}};
      if (rest.rfind("mlp.fc2.", 0) == 0) return whole(p + "mlp.down_proj." + suffix);
      if (rest.rfind("input_layernorm.", 0) == 0 || rest.rfind("post_attention_layernorm.", 0) == 0 ||
          rest.rfind("self_attn.", 0) == 0)
        return whole(p + rest);
    }
  }
  fail(where, ": parameter '", name, "' has no HuggingFace counterpart in this layout");
}

bool ignorable(const std::string& hf) {
  auto ends_with = [&](const std::string& suf) {
    return hf.size() >= suf.size() && hf.compare(hf.size() - suf.size(), suf.size(), suf) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq");
}

float hf_at(const Tensor& t, bool transpose, int64_t r, int64_t k, int64_t K) {
  const int64_t idx = transpose ? k * (t.numel() / K) + r : r * K + k;  // transposed: stored [K, R]
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(t.raw())[idx];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[idx]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(t.raw())[idx]);
    default: fail("HuggingFace tensor of dtype ", dtype_name(t.dtype()), " cannot be converted (F32, BF16, F16)");
  }
}

void hf_set(Tensor& t, bool transpose, int64_t r, int64_t k, int64_t K, float v) {
  const int64_t idx = transpose ? k * (t.numel() / K) + r : r * K + k;
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(t.raw())[idx] = v; break;
    case DType::BF16: static_cast<uint16_t*>(t.raw())[idx] = f32_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(t.raw())[idx] = f32_to_f16(v); break;
    default: fail("cannot write HuggingFace tensors of dtype ", dtype_name(t.dtype()));
  }
}

}  // namespace megadlm
