#pragma once
// What the BERT embedding and head tests share: their small config, a double LayerNorm of one row
// (the reference), a parameter's values by name, and the dense MLP in double (also the vision tower's).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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

// An MLP's fc2(act(fc1(x))) in double from the fp32 parameters `name`.fc{1,2}.{weight,bias}: x [N, C]
// -> [N, C], F hidden features.
inline std::vector<double> mlp_reference(const ParamStore& s, const std::string& name, const std::vector<float>& x,
                                         int C, int F, const std::function<double(double)>& act) {
  const float *w1 = param(s, name + ".fc1.weight"), *b1 = param(s, name + ".fc1.bias"),
              *w2 = param(s, name + ".fc2.weight"), *b2 = param(s, name + ".fc2.bias");
  const int N = static_cast<int>(x.size()) / C;
  std::vector<double> y(x.size()), a(F);
  for (int n = 0; n < N; ++n) {
    for (int f = 0; f < F; ++f) {
      double h = b1[f];
      for (int c = 0; c < C; ++c) h += static_cast<double>(w1[f * C + c]) * x[n * C + c];
      a[f] = act(h);
    }
    for (int c = 0; c < C; ++c) {
      double o = b2[c];
      for (int f = 0; f < F; ++f) o += static_cast<double>(w2[c * F + f]) * a[f];
      y[n * C + c] = o;
    }
  }
  return y;
}

}  // namespace megadlm::test
