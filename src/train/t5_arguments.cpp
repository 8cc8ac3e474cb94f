#include "train/t5_arguments.h"

#include <algorithm>

#include "core/error.h"
#include "train/model_type_flags.h"

namespace megadlm {

namespace {

const char* const kT5Flags[] = {"encoder-seq-length", "decoder-seq-length", "vocab-extra-ids",
                                "encoder-num-layers", "decoder-num-layers", "relative-attention-num-buckets",
                                "relative-attention-max-distance", "t5-feed-forward"};

}  // namespace

void declare_t5_flags(CliFlags& f) {
  f.add_int("encoder-seq-length", 0, "--model-type t5: encoder rows a sample (default --seq-length)", at_least(0));
  f.add_int("decoder-seq-length", 128, "--model-type t5: decoder rows a sample (the span-corruption targets)", at_least(1));
  f.add_int("vocab-extra-ids", 100, "--model-type t5: sentinel tokens <extra_id_0> .. appended to the vocabulary", at_least(0));
  f.add_int("encoder-num-layers", 0, "--model-type t5: encoder layers (default --num-layers)", at_least(0));
  f.add_int("decoder-num-layers", 0, "--model-type t5: decoder layers (default the encoder's)", at_least(0));
  f.add_int("relative-attention-num-buckets", 32, "--model-type t5: relative position buckets", at_least(2));
  f.add_int("relative-attention-max-distance", 128, "--model-type t5: relative distance of the last bucket", at_least(1));
  f.add_string("t5-feed-forward", "relu", "--model-type t5: relu (T5 v1.0) or gated-gelu (v1.1)");
}

void read_t5_flags(const CliFlags& f, bool t5, TransformerConfig& model, int64_t* seq_length, T5Args& out) {
  refuse_flags_for_other_models(f, t5, kT5Flags, "--model-type t5");
  if (!t5) return;
  MEGADLM_CHECK(!f.get_bool("swiglu"), "--swiglu does not apply to --model-type t5: its feed-forward is ",
                "--t5-feed-forward relu (v1.0) or gated-gelu (v1.1)");
  if (f.get_int("encoder-num-layers") > 0) model.num_layers = f.get_int("encoder-num-layers");
  if (!f.given("normalization")) model.normalization = NormKind::RMSNorm;
  if (!f.given("norm-epsilon")) model.norm_epsilon = 1e-6f;
  if (!f.given("position-embedding-type")) model.position_embedding = PositionEmbedding::None;
  model.add_bias_linear = false;  // T5 has none; --add-qkv-bias is refused by validate_t5
  out.encoder_seq_length = f.get_int("encoder-seq-length") > 0 ? f.get_int("encoder-seq-length") : *seq_length;
  *seq_length = out.encoder_seq_length;
  model.max_position_embeddings = std::max(model.max_position_embeddings, out.encoder_seq_length);
  out.decoder_seq_length = f.get_int("decoder-seq-length");
  out.vocab_extra_ids = f.get_int("vocab-extra-ids");
  out.options = default_t5_options(model);
  if (f.get_int("decoder-num-layers") > 0) out.options.num_decoder_layers = f.get_int("decoder-num-layers");
  out.options.relative_attention_num_buckets = f.get_int("relative-attention-num-buckets");
  out.options.relative_attention_max_distance = f.get_int("relative-attention-max-distance");
  out.options.feed_forward = t5_feed_forward_from_name(f.get_string("t5-feed-forward"), "--t5-feed-forward");
  validate_t5(model, out.options);
}

}  // namespace megadlm
