#include "models/model_spec.h"

#include "core/error.h"
#include "models/bert_spec.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "models/t5_spec.h"

namespace megadlm {

ModelType model_type_from_name(const std::string& name) {
  if (name == "gpt") return ModelType::GPT;
  if (name == "difflm") return ModelType::DiffLM;
  if (name == "bert") return ModelType::BERT;
  if (name == "t5") return ModelType::T5;
  fail("--model-type: unknown value '", name, "' (expected difflm, gpt, bert, t5 or llava)");
}

const char* model_type_name(ModelType t) {
  switch (t) {
    case ModelType::GPT: return "gpt";
    case ModelType::DiffLM: return "difflm";
    case ModelType::BERT: return "bert";
    case ModelType::T5: return "t5";
  }
  return "?";
}

ModelSpec decoder_model_spec(const TransformerConfig& cfg, const LayerSpec& layer) {
  ModelSpec m;
  m.embedding.learned_positions = cfg.position_embedding == PositionEmbedding::LearnedAbsolute;
  StackSpec s;
  s.prefix = "layers";
  s.num_layers = cfg.num_layers;
  s.layer = [layer, moe = cfg.moe](int64_t l) {
    LayerSpec spec = layer;
    if (moe.is_moe_layer(l)) spec.mlp.kind = FeedForwardKind::MoE;  // --num-experts with --moe-layer-freq
    return spec;
  };
  s.final_norm = true;
  s.final_norm_name = "norm";
  s.final_norm_kind = layer.norm.kind;
  m.stacks.push_back(s);
  m.heads.push_back(HeadSpec{HeadKind::LM, !cfg.untie_embeddings_and_output_weights});
  return m;
}

ModelSpec model_spec(ModelType type, const TransformerConfig& cfg) {
  switch (type) {
    case ModelType::GPT: return gpt_model_spec(cfg);
    case ModelType::DiffLM: return difflm_model_spec(cfg);
    case ModelType::BERT: return bert_model_spec(cfg);
    case ModelType::T5: return t5_model_spec(cfg, default_t5_options(cfg));
  }
  fail("unknown model type");
}

MaskType attention_mask_type_from_name(const std::string& name) {
  if (name == "no_mask" || name == "bidirectional") return MaskType::None;
  if (name == "causal") return MaskType::Causal;
  if (name == "block_causal") return MaskType::BlockCausal;
  fail("--attention-mask-type: unknown value '", name, "' (expected no_mask, causal or block_causal)");
}

}  // namespace megadlm
