#pragma once
// An emulated CUDA device for machines without a GPU: its "device memory" is host memory tracked
// block by block and inaccessible (PROT_NONE) outside the backend's ops, and its backend runs the CPU
// kernels after checking that every pointer it is given lies inside such a block. Installed with
// set_backend_for_testing, it lets the device plumbing of the modules (uploads, device arenas, weight
// copies, the optimizer, checkpoints through a host copy) run here: a host pointer handed to a device
// op throws, naming the op; host code touching device memory faults. What it cannot see: the CUDA
// kernels themselves (test_cuda's op tests) and stream ordering (one stream, synchronous copies).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/device_memory.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/dispatch.h"
#include "parallel/device_communicator.h"

namespace megadlm::test {

// Device memory: page-aligned mappings kept PROT_NONE except while a backend op (or a copy of the
// memory table) runs, so host code that reads or writes device memory outside the ops faults at once
// (the SIGSEGV handler of EmulatedCudaScope names the cause), as it would on a GPU.
class EmulatedDeviceMemory {
 public:
  static EmulatedDeviceMemory& get() {
    static EmulatedDeviceMemory m;
    return m;
  }
  void* alloc(size_t bytes) {
    const size_t len = mapped_length(bytes);
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MEGADLM_CHECK(p != MAP_FAILED, "emulated device: out of memory");
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ > 0) mprotect(p, len, PROT_READ | PROT_WRITE);
    blocks_[reinterpret_cast<uintptr_t>(p)] = bytes;
    return p;
  }
  void free(void* p) {
    if (!p) return;
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
      if (it == blocks_.end()) return;
      bytes = it->second;
      blocks_.erase(it);
    }
    munmap(p, mapped_length(bytes));
  }
  bool contains(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return false;
    --it;
    return a < it->first + std::max<size_t>(it->second, 1);
  }
  // Device memory readable and writable while an op runs (nested scopes count).
  class Open {
   public:
    Open() { get().set_open(+1); }
    ~Open() { get().set_open(-1); }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;
  };

 private:
  static size_t mapped_length(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return std::max<size_t>((bytes + page - 1) / page * page, page);
  }
  void set_open(int delta) {
    std::lock_guard<std::mutex> lock(mu_);
    const int before = open_;
    open_ += delta;
    if ((before == 0) == (open_ == 0)) return;  // only the outermost scope changes the protection
    const int prot = open_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
    for (const auto& [a, bytes] : blocks_) mprotect(reinterpret_cast<void*>(a), mapped_length(bytes), prot);
  }
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;
  int open_ = 0;
};

// Device pointers checked so far (a test can see that the emulated backend was used at all).
inline std::atomic<int64_t>& emulated_pointer_checks() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Rows gathered by moe_permute so far (in a dense model: the output layer's selection of the rows with a
// loss, Backend::gather_rows).
inline std::atomic<int64_t>& emulated_gathered_rows() {
  static std::atomic<int64_t> n{0};
  return n;
}

// gemm_fp8 calls so far (the Linear layers' fp8 products under --fp8-format).
inline std::atomic<int64_t>& emulated_fp8_products() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Grouped expert products (Backend::grouped_gemm_*) run so far.
inline std::atomic<int64_t>& emulated_grouped_products() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Collectives run by the emulated device communicator so far.
inline std::atomic<int64_t>& emulated_collectives() {
  static std::atomic<int64_t> n{0};
  return n;
}

inline void on_device(const void* p, const char* op) {
  ++emulated_pointer_checks();
  if (p != nullptr && !EmulatedDeviceMemory::get().contains(p))
    fail("emulated device: ", op, " was given a pointer outside device memory (a host array not uploaded?)");
}
inline void on_host(const void* p, const char* op) {
  if (p != nullptr && EmulatedDeviceMemory::get().contains(p))
    fail("emulated device: ", op, " was given device memory where a host pointer belongs");
}

class EmulatedCudaBackend final : public Backend {
 private:
  static const Backend& cpu() { return cpu_backend(); }
  // Every pointer checked to be device memory, then the CPU kernel run with the memory open.
  template <typename Kernel>
  static auto on_cpu(std::initializer_list<const void*> ps, const char* op, Kernel&& kernel) {
    for (const void* p : ps) on_device(p, op);
    const EmulatedDeviceMemory::Open open;
    return kernel();
  }

 public:
  Device device() const override { return Device::CUDA; }
  void copy_to_device(void* dst, const void* src, size_t bytes) const override {
    on_device(dst, "copy_to_device"), on_host(src, "copy_to_device");
    const EmulatedDeviceMemory::Open open;
    cpu().copy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    on_host(dst, "copy_to_host"), on_device(src, "copy_to_host");
    const EmulatedDeviceMemory::Open open;
    cpu().copy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) const override {
    on_cpu({dst, src}, "copy", [&] { return cpu().copy(dst, src, bytes); });
  }
  void zero(void* dst, size_t bytes) const override {
    on_cpu({dst}, "zero", [&] { return cpu().zero(dst, bytes); });
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override {
    on_cpu({dst, src}, "copy_2d", [&] { return cpu().copy_2d(dst, dst_pitch, src, src_pitch, width, rows); });
  }
  void synchronize() const override {}
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc) const override {
    on_cpu({A, B, C}, "gemm", [&] { return cpu().gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
  }
  void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                 const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) const override {
    on_cpu({A, B, C}, "gemm_bf16",
           [&] { return cpu().gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
  }
  void gemm_fp8(int64_t M, int64_t N, int64_t K, const uint8_t* A, bool a_e5m2, float a_scale, const uint8_t* B,
                bool b_e5m2, float b_scale, float beta, float* C) const override {
    ++emulated_fp8_products();
    on_cpu({A, B, C}, "gemm_fp8",
           [&] { return cpu().gemm_fp8(M, N, K, A, a_e5m2, a_scale, B, b_e5m2, b_scale, beta, C); });
  }
  // As a GPU with fp8 tensor cores, so that the Linear layers' fp8-operand path runs here (its products
  // by the CPU's definition: the dequantised values in fp32).
  bool fp8_products() const override { return true; }
  void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C) const override {
    on_cpu({out, in}, "transpose_u8", [&] { return cpu().transpose_u8(out, in, R, C); });
  }
  // The grouped products: offsets and the pointer arrays are host arrays, every pointer in them device memory.
  template <typename Ptr>
  static void grouped_pointers_on_device(int64_t G, const int64_t* offsets, const Ptr* ptrs, const char* op) {
    on_host(offsets, op), on_host(ptrs, op);
    for (int64_t g = 0; g < G; ++g) on_device(ptrs[g], op);
    ++emulated_grouped_products();
  }
  void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                            const float* const* W, float* Y) const override {
    grouped_pointers_on_device(G, offsets, W, "grouped_gemm_forward");
    on_cpu({X, Y}, "grouped_gemm_forward", [&] { return cpu().grouped_gemm_forward(G, offsets, N, K, X, W, Y); });
  }
  void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* const* W, float* dX) const override {
    grouped_pointers_on_device(G, offsets, W, "grouped_gemm_backward_data");
    on_cpu({dY, dX}, "grouped_gemm_backward_data",
           [&] { return cpu().grouped_gemm_backward_data(G, offsets, N, K, dY, W, dX); });
  }
  void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                    const float* X, float* const* dW) const override {
    grouped_pointers_on_device(G, offsets, dW, "grouped_gemm_backward_weight");
    on_cpu({dY, X}, "grouped_gemm_backward_weight",
           [&] { return cpu().grouped_gemm_backward_weight(G, offsets, N, K, dY, X, dW); });
  }
  void softmax_forward(float* out, const float* inp, int64_t N, int64_t V) const override {
    on_cpu({out, inp}, "softmax_forward", [&] { return cpu().softmax_forward(out, inp, N, V); });
  }
  void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V) const override {
    on_cpu({din, out, dout}, "softmax_backward", [&] { return cpu().softmax_backward(din, out, dout, N, V); });
  }
  void gelu_forward(float* out, const float* inp, int64_t n) const override {
    on_cpu({out, inp}, "gelu_forward", [&] { return cpu().gelu_forward(out, inp, n); });
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    on_cpu({dinp, inp, dout}, "gelu_backward", [&] { return cpu().gelu_backward(dinp, inp, dout, n); });
  }
  void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) const override {
    on_cpu({out, gate_up}, "swiglu_forward", [&] { return cpu().swiglu_forward(out, gate_up, N, F); });
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F) const override {
    on_cpu({dgate_up, gate_up, dout}, "swiglu_backward",
           [&] { return cpu().swiglu_backward(dgate_up, gate_up, dout, N, F); });
  }
  void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) const override {
    on_cpu({out, bias}, "bias_add_forward", [&] { return cpu().bias_add_forward(out, bias, N, C); });
  }
  void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) const override {
    on_cpu({dbias, dout}, "bias_backward", [&] { return cpu().bias_backward(dbias, dout, N, C); });
  }
  void add_inplace(float* a, const float* b, int64_t n) const override {
    on_cpu({a, b}, "add_inplace", [&] { return cpu().add_inplace(a, b, n); });
  }
  void moe_permute(float* rows, const float* x, const int32_t* token, const float* weight, int64_t P,
                   int64_t C) const override {
    emulated_gathered_rows() += P;
    on_cpu({rows, x, token, weight}, "moe_permute", [&] { return cpu().moe_permute(rows, x, token, weight, P, C); });
  }
  void moe_unpermute(float* out, const float* rows, const int32_t* offsets, const int32_t* list, const float* weight,
                     int64_t N, int64_t C) const override {
    on_cpu({out, rows, offsets, list, weight}, "moe_unpermute",
           [&] { return cpu().moe_unpermute(out, rows, offsets, list, weight, N, C); });
  }
  void moe_unpermute_weight_grad(float* dweight, const float* dout, const float* rows, const int32_t* token, int64_t P,
                                 int64_t C) const override {
    on_cpu({dweight, dout, rows, token}, "moe_unpermute_weight_grad",
           [&] { return cpu().moe_unpermute_weight_grad(dweight, dout, rows, token, P, C); });
  }
  void scale_inplace(float* a, float s, int64_t n) const override {
    on_cpu({a}, "scale_inplace", [&] { return cpu().scale_inplace(a, s, n); });
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, float eps) const override {
    on_cpu({out, mean, rstd, inp, weight, bias}, "layernorm_forward",
           [&] { return cpu().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps); });
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) const override {
    on_cpu({dinp, dweight, dbias, dout, inp, weight, mean, rstd}, "layernorm_backward",
           [&] { return cpu().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                       float eps) const override {
    on_cpu({out, rstd, inp, weight}, "rmsnorm_forward",
           [&] { return cpu().rmsnorm_forward(out, rstd, inp, weight, N, C, eps); });
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) const override {
    on_cpu({dinp, dweight, dout, inp, weight, rstd}, "rmsnorm_backward",
           [&] { return cpu().rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C); });
  }
  void rope_forward(float* out, const float* inp, const int32_t* positions, const float* cos, const float* sin,
                    int64_t N, int64_t H, int64_t D) const override {
    on_cpu({out, inp, positions, cos, sin}, "rope_forward",
           [&] { return cpu().rope_forward(out, inp, positions, cos, sin, N, H, D); });
  }
  void rope_backward(float* dinp, const float* dout, const int32_t* positions, const float* cos, const float* sin,
                     int64_t N, int64_t H, int64_t D) const override {
    on_cpu({dinp, dout, positions, cos, sin}, "rope_backward",
           [&] { return cpu().rope_backward(dinp, dout, positions, cos, sin, N, H, D); });
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                         const int32_t* positions, const float* wpe, int64_t N, int64_t C) const override {
    on_cpu({out, tokens, wte, positions, wpe}, "embedding_forward",
           [&] { return cpu().embedding_forward(out, tokens, wte, vocab_start, V, positions, wpe, N, C); });
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t vocab_start,
                          int64_t V, const int32_t* positions, int64_t N, int64_t C) const override {
    on_cpu({dwte, dwpe, dout, tokens, positions}, "embedding_backward",
           [&] { return cpu().embedding_backward(dwte, dwpe, dout, tokens, vocab_start, V, positions, N, C); });
  }
  // The device's contract: fp32 logits, a bf16 gradient cast from the fp32 one (kernels/cuda/backend_cuda.cpp).
  static void check_device_contract(const CrossEntropyArgs& a, const char* op) {
    MEGADLM_CHECK(!a.logits_bf16, "emulated device ", op, ": the device takes fp32 logits");
    MEGADLM_CHECK(a.dlogits_bf16 == nullptr || a.dlogits != nullptr, "emulated device ", op,
                  ": a bf16 gradient needs dlogits");
  }
  CrossEntropyArgs fp32_gradient(const CrossEntropyArgs& a) const {
    CrossEntropyArgs f = a;
    f.dlogits_bf16 = nullptr;
    return f;
  }
  void cast_gradient(const CrossEntropyArgs& a) const {
    if (a.dlogits_bf16) cast_f32_to_bf16(a.dlogits_bf16, a.dlogits, a.N * a.Vl);
  }
  double cross_entropy(const CrossEntropyArgs& a) const override {
    check_device_contract(a, "cross_entropy");
    const double sum = on_cpu({a.losses, a.dlogits, a.logits, a.targets, a.weights}, "cross_entropy",
                              [&] { return cpu().cross_entropy(fp32_gradient(a)); });
    cast_gradient(a);
    return sum;
  }
  void cross_entropy_shard_max(float* row_max, const CrossEntropyArgs& a) const override {
    check_device_contract(a, "cross_entropy_shard_max");
    on_cpu({row_max, a.logits, a.targets}, "cross_entropy_shard_max",
           [&] { return cpu().cross_entropy_shard_max(row_max, a); });
  }
  void cross_entropy_shard_sumexp(double* stats, const float* row_max, const CrossEntropyArgs& a) const override {
    check_device_contract(a, "cross_entropy_shard_sumexp");
    on_cpu({stats, a.dlogits, a.logits, row_max, a.targets}, "cross_entropy_shard_sumexp",
           [&] { return cpu().cross_entropy_shard_sumexp(stats, row_max, a); });
  }
  double cross_entropy_shard_finish(const double* stats, const float* row_max, const CrossEntropyArgs& a) const override {
    check_device_contract(a, "cross_entropy_shard_finish");
    const double sum = on_cpu({a.losses, a.dlogits, stats, row_max, a.targets, a.weights}, "cross_entropy_shard_finish",
                              [&] { return cpu().cross_entropy_shard_finish(stats, row_max, fp32_gradient(a)); });
    cast_gradient(a);
    return sum;
  }
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                         int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                         float scale) const override {
    on_cpu({out, lse, q, k, v, mask.segment_ids, mask.key_segment_ids}, "attention_forward",
           [&] { return cpu().attention_forward(out, lse, q, k, v, B, T, H, K, D, mask, scale); });
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t H,
                          int64_t K, int64_t D, const AttentionMask& mask, float scale) const override {
    on_cpu({dq, dk, dv, dout, q, k, v, out, lse, mask.segment_ids, mask.key_segment_ids}, "attention_backward",
           [&] { return cpu().attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, K, D, mask, scale); });
  }
  void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                       int64_t H, int64_t D) const override {
    on_cpu({acc_out, acc_lse, out, lse}, "attention_merge",
           [&] { return cpu().attention_merge(acc_out, acc_lse, out, lse, B, T, H, D); });
  }
  void attention_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                              float scale) const override {
    on_cpu({out, lse, q, k, v, mask.segment_ids}, "attention_forward_bf16",
           [&] { return cpu().attention_forward_bf16(out, lse, q, k, v, B, T, H, K, D, mask, scale); });
  }
  void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                               const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse, int64_t B,
                               int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                               float scale) const override {
    on_cpu({dq, dk, dv, dout, q, k, v, out, lse, mask.segment_ids}, "attention_backward_bf16", [&] {
      return cpu().attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, K, D, mask, scale);
    });
  }
  void cast_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) const override {
    on_cpu({out, inp}, "cast_f32_to_bf16", [&] { return cpu().cast_f32_to_bf16(out, inp, n); });
  }
  void cast_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) const override {
    on_cpu({out, inp}, "cast_bf16_to_f32", [&] { return cpu().cast_bf16_to_f32(out, inp, n); });
  }
  void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                                const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                                int64_t D, bool causal, float scale) const override {
    on_cpu({out, q, k_cache, v_cache, offsets}, "decode_attention_forward", [&] {
      return cpu().decode_attention_forward(out, q, k_cache, v_cache, offsets, B, Tn, S, H, K, D, causal, scale);
    });
  }
  void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n) const override {
    on_cpu({out, inp}, "cast_f32_to_f16", [&] { return cpu().cast_f32_to_f16(out, inp, n); });
  }
  void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n) const override {
    on_cpu({out, inp}, "cast_f16_to_f32", [&] { return cpu().cast_f16_to_f32(out, inp, n); });
  }
  void cast_f32_to_fp8(uint8_t* out, const float* inp, int64_t n, float scale, bool e5m2) const override {
    on_cpu({out, inp}, "cast_f32_to_fp8", [&] { return cpu().cast_f32_to_fp8(out, inp, n, scale, e5m2); });
  }
  void cast_fp8_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, bool e5m2) const override {
    on_cpu({out, inp}, "cast_fp8_to_f32", [&] { return cpu().cast_fp8_to_f32(out, inp, n, inv_scale, e5m2); });
  }
  void round_to_bf16(float* x, int64_t n) const override {
    on_cpu({x}, "round_to_bf16", [&] { return cpu().round_to_bf16(x, n); });
  }
  void round_to_f16(float* x, int64_t n) const override {
    on_cpu({x}, "round_to_f16", [&] { return cpu().round_to_f16(x, n); });
  }
  void quantize_dequantize_fp8(float* x, int64_t n, float scale, bool e5m2) const override {
    on_cpu({x}, "quantize_dequantize_fp8", [&] { return cpu().quantize_dequantize_fp8(x, n, scale, e5m2); });
  }
  void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                  uint16_t* param_bf16) const override {
    on_cpu({param, grad, m, v, param_bf16}, "adamw_step",
           [&] { return cpu().adamw_step(param, grad, m, v, n, h, param_bf16); });
  }
  double sum_squares(const float* x, int64_t n) const override {
    return on_cpu({x}, "sum_squares", [&] { return cpu().sum_squares(x, n); });
  }
  float abs_max(const float* x, int64_t n) const override {
    return on_cpu({x}, "abs_max", [&] { return cpu().abs_max(x, n); });
  }
  bool all_finite(const float* x, int64_t n) const override {
    return on_cpu({x}, "all_finite", [&] { return cpu().all_finite(x, n); });
  }

};

// The emulated device's NCCL: the collectives of the host communicator the group bootstraps from (MPI
// under mpirun), on device buffers, each pointer checked to be device memory and the memory open while
// the call runs. A group that hands its host communicator device memory faults, one that hands this
// one a host array throws, naming the collective. all_reduce_sum_async completes at once (MPI's
// non-blocking progress would touch the memory after it is closed again), so overlap is not emulated,
// only the calls. `host` belongs to the same ParallelGroup and outlives this.
class EmulatedDeviceCommunicator final : public Communicator {
 public:
  EmulatedDeviceCommunicator(Communicator& host, const std::string& name)
      : Communicator(host.size(), host.rank(), name), host_(host) {}
  static std::shared_ptr<Communicator> make(Communicator& host, const std::string& name) {
    return std::make_shared<EmulatedDeviceCommunicator>(host, name);
  }

  void all_reduce_sum(float* data, int64_t n) override {
    run({data}, "all_reduce_sum", 4.0 * n, [&] { host_.all_reduce_sum(data, n); });
  }
  void all_reduce_sum(double* data, int64_t n) override {
    run({data}, "all_reduce_sum", 8.0 * n, [&] { host_.all_reduce_sum(data, n); });
  }
  void all_reduce_max(float* data, int64_t n) override {
    run({data}, "all_reduce_max", 4.0 * n, [&] { host_.all_reduce_max(data, n); });
  }
  CommRequest all_reduce_sum_async(float* data, int64_t n) override {
    all_reduce_sum(data, n);
    ++async_calls_;
    return {};
  }
  void wait(CommRequest& req) override { req = CommRequest(); }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    run({in, out}, "reduce_scatter_sum", 4.0 * n * size_, [&] { host_.reduce_scatter_sum(in, out, n); });
  }
  void all_gather(const float* in, float* out, int64_t n) override {
    run({in, out}, "all_gather", 4.0 * n * size_, [&] { host_.all_gather(in, out, n); });
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    run({data}, "broadcast", static_cast<double>(bytes), [&] { host_.broadcast(data, bytes, root); });
  }
  void send(const void* data, int64_t bytes, int dst, int tag) override {
    run({data}, "send", static_cast<double>(bytes), [&] { host_.send(data, bytes, dst, tag); });
  }
  void recv(void* data, int64_t bytes, int src, int tag) override {
    run({data}, "recv", 0, [&] { host_.recv(data, bytes, src, tag); });
  }
  // Completed before returning, as all_reduce_sum_async.
  CommRequest send_recv_async(const void* send, int64_t send_bytes, int dst, void* recv, int64_t recv_bytes, int src,
                              int tag) override {
    run({send, recv}, "send_recv_async", static_cast<double>(send_bytes), [&] {
      CommRequest req = host_.send_recv_async(send, send_bytes, dst, recv, recv_bytes, src, tag);
      host_.wait(req);
    });
    return {};
  }
  void all_to_all_v(const float* send, const int64_t* send_counts, float* recv, const int64_t* recv_counts) override {
    on_host(send_counts, "all_to_all_v (counts)"), on_host(recv_counts, "all_to_all_v (counts)");
    run({send, recv}, "all_to_all_v", 0, [&] { host_.all_to_all_v(send, send_counts, recv, recv_counts); });
  }
  void barrier() override { host_.barrier(); }
  int64_t async_calls() const { return async_calls_; }

 private:
  template <typename Call>
  void run(std::initializer_list<const void*> ps, const char* op, double bytes, Call&& call) {
    for (const void* p : ps) on_device(p, op);
    ++emulated_collectives();
    CommTimer t(stats_, bytes);
    const EmulatedDeviceMemory::Open open;
    call();
  }
  Communicator& host_;
  int64_t async_calls_ = 0;
};

// Installs the emulated device for one scope (tests only run it where no real GPU is visible).
class EmulatedCudaScope {
 public:
  EmulatedCudaScope() {
    DeviceMemory m;
    m.device = Device::CUDA;
    m.alloc = [](size_t bytes) { return EmulatedDeviceMemory::get().alloc(bytes); };
    m.free = [](void* p) { EmulatedDeviceMemory::get().free(p); };
    m.zero = [](void* p, size_t bytes) {
      on_device(p, "zero");
      const EmulatedDeviceMemory::Open open;
      if (bytes) std::memset(p, 0, bytes);
    };
    m.copy = [](void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes) {
      if (dst_dev) on_device(dst, "copy (destination)");
      else on_host(dst, "copy (destination)");
      if (src_dev) on_device(src, "copy (source)");
      else on_host(src, "copy (source)");
      const EmulatedDeviceMemory::Open open;
      if (bytes) std::memmove(dst, src, bytes);
    };
    register_device_memory(m);
    set_backend_for_testing(Device::CUDA, &backend_);
    previous_communicator_ = register_device_communicator(Device::CUDA, &EmulatedDeviceCommunicator::make);
    // A fault while the scope is active is most likely host code touching device memory: say so.
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      static const char msg[] =
          "\nemulated device: SIGSEGV, most likely host code reading or writing device memory outside a backend op\n";
      (void)!write(2, msg, sizeof msg - 1);
      signal(SIGSEGV, SIG_DFL);
      raise(SIGSEGV);
    };
    sigaction(SIGSEGV, &sa, &previous_);
  }
  ~EmulatedCudaScope() {
    sigaction(SIGSEGV, &previous_, nullptr);
    register_device_communicator(Device::CUDA, previous_communicator_);
    set_backend_for_testing(Device::CUDA, nullptr);
  }
  EmulatedCudaScope(const EmulatedCudaScope&) = delete;
  EmulatedCudaScope& operator=(const EmulatedCudaScope&) = delete;

 private:
  EmulatedCudaBackend backend_;
  DeviceCommunicatorFactory previous_communicator_ = nullptr;
  struct sigaction previous_ {};
};

}  // namespace megadlm::test
