#pragma once
// What the BERT embedding and head tests share: their small config, a double LayerNorm of one row
// (the reference), and a parameter's values by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/parameters.h"
#include "nn/transformer_config.h"

namespace megadlm::test {

inline TransformerConfig small_bert_config() {
  TransformerConfig c;
  c.hidden_size = 8;
  c.vocab_size = 13;
  c.max_position_embeddings = 6;
  c.ffn_hidden_size = 12;
  c.norm_epsilon = 1e-5f;
  return c;
}

// LayerNorm of one row in double.
inline std::vector<double> layernorm(const std::vector<double>& x, const float* w, const float* b, double eps) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  std::vector<double> y(x.size());
  for (size_t c = 0; c < x.size(); ++c) y[c] = (x[c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
  return y;
}

inline const float* param(const ParamStore& s, const std::string& name) {
  const int id = s.find(name);
  EXPECT_GE(id, 0) << name;
  return s.values() + s.info(id).offset;
}

}  // namespace megadlm::test
