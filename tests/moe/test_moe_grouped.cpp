// The MoE experts' grouped path (--moe-grouped-gemm: Backend::grouped_gemm_*) against the looped path on
// uneven loads with empty experts (first, inner, last), GELU with biases and SwiGLU without, on one thread
// and on several (where the grouped products cut the heavily loaded experts into pieces), with experts
// numbered from a first_expert as an expert-parallel rank registers them. The two agree to fp32
// rounding (kernels/cpu/grouped_gemm.h: the products' summation order may differ), within 1e-5
// relative. The layer's finite-difference checks with grouped on are in test_moe.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "nn/moe/moe_experts.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

struct ExpertsRun {
  std::vector<float> out, dx, grads;
};

ExpertsRun run_experts(bool grouped, Activation act, bool bias, const std::vector<int64_t>& off, int64_t first_expert) {
  const int64_t E = static_cast<int64_t>(off.size()) - 1, P = off.back(), C = 48, F = 72;
  TransformerConfig cfg;
  cfg.hidden_size = C;
  cfg.add_bias_linear = bias;
  ParamStore store;
  MoEExperts experts(store, "experts", cfg, act, E, F, 0.02f, grouped, first_expert);
  store.finalize();
  // Every parameter (biases too) away from zero, the same for both paths.
  const std::vector<float> values = random_vector(store.numel(), 31, -0.2f, 0.2f);
  store.copy_values_from_host(values.data());
  std::vector<float> x = random_vector(P * C, 32), dy = random_vector(P * C, 33);
  Arena arena;
  ExpertsRun r;
  Tensor out = experts.forward(arena, Tensor::borrow(x.data(), {P, C}, DType::F32), off);
  r.out.assign(out.data<float>(), out.data<float>() + P * C);
  r.dx.assign(static_cast<size_t>(P * C), std::nanf(""));  // written by backward
  Tensor dxp = Tensor::borrow(r.dx.data(), {P, C}, DType::F32);
  experts.backward(arena, Tensor::borrow(dy.data(), {P, C}, DType::F32), dxp);
  r.grads.assign(store.grads(), store.grads() + store.numel());
  return r;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(a[i]))) << what << " at " << i;
}

}  // namespace

TEST(MoEGrouped, GroupedEqualsLoopedOnUnevenLoads) {
  // Rows per expert: empty first, inner and last experts, one expert with most of the rows, single rows.
  std::vector<int64_t> off{0};
  for (int64_t n : {0, 150, 3, 0, 1, 40, 0}) off.push_back(off.back() + n);
  const int before = omp_get_max_threads();
  for (int threads : {1, 3})
    for (const auto& [act, bias] : {std::pair{Activation::Gelu, true}, std::pair{Activation::SwiGLU, false}}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + (act == Activation::Gelu ? " gelu" : " swiglu"));
      omp_set_num_threads(threads);
      const ExpertsRun looped = run_experts(false, act, bias, off, 3), grouped = run_experts(true, act, bias, off, 3);
      expect_close(looped.out, grouped.out, "out");
      expect_close(looped.dx, grouped.dx, "dx");
      expect_close(looped.grads, grouped.grads, "parameter gradients");
    }
  omp_set_num_threads(before);
}

// The parameters of an expert-parallel rank's experts carry their global numbers.
TEST(MoEGrouped, ExpertsAreNamedFromTheirFirstExpert) {
  TransformerConfig cfg;
  cfg.hidden_size = 8;
  ParamStore store;
  MoEExperts experts(store, "experts", cfg, Activation::Gelu, 2, 4, 0.02f, true, 3);
  EXPECT_GE(store.find("experts.3.fc1.weight"), 0);
  EXPECT_GE(store.find("experts.4.fc2.weight"), 0);
  EXPECT_EQ(store.find("experts.0.fc1.weight"), -1);
}
