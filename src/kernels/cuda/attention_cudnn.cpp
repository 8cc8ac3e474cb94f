// AttentionImpl::Cudnn: attention forward and backward through cuDNN's fused scaled-dot-product
// attention (the flash-attention kernels cuDNN ships for sm_80 / sm_90), built with the cuDNN frontend's
// graph API. Compiled only when CMake finds the frontend headers and libcudnn (MEGADLM_HAVE_CUDNN_FRONTEND);
// attention.cu decides when to call it.
//
// What cuDNN takes here: bf16 q/k/v/out, no mask or the causal one (top-left diagonal: key j visible to
// query i iff j <= i), GQA (K divides H), head dim a multiple of 8 (cuDNN's own limit, 128 or 256 by
// version and device, is checked when the graph is built). Block-causal and per-document masks and fp32
// stay with the flash / cuBLASLt implementations.
//
// Layout. Our tensors are row-major [B,T,H,D]; cuDNN names the dims [B,H,T,D] and reads any strides, so
// q is described as dims {B,H,T,D} with strides {T*H*D, D, H*D, 1} (cuDNN's "BSHD"), k/v likewise with K.
//
// Log-sum-exp. cuDNN's "Stats" output (generate_stats) is, per query row, max + ln(sum exp(s - max)) of
// the scaled scores s = scale * q.k: the natural-log log-sum-exp, which is exactly our lse contract
// ([B,H,T] fp32 = dims {B,H,T,1}, strides {H*T, T, 1, 1}), so it is written in place with no conversion
// (stats_use_log2 stays off). The backward reads it back as its Stats input.
//
// Graphs are built once per (device, direction, B, T, H, K, D, mask, scale, dtype) and cached, as are the
// shapes cuDNN rejects (with its message), so a rejected shape costs one build attempt. One cuDNN handle
// per device; calls are serialised by a mutex (a handle is not thread-safe) and run on the caller's stream.
// The workspace is allocated stream-ordered per call from the pool that device.cpp keeps warm.
//
// Determinism: the backward asks for cuDNN's deterministic algorithm (no atomics in dQ, as the rest of
// the backend); where this cuDNN has none for the shape, the graph is rebuilt without it and a line is
// logged once. On sm_90 the deterministic backward keeps dP in a workspace of B*H*T*T*2 bytes (512 MiB
// for B=4, H=16, T=2048) and may be slower: env MEGADLM_CUDNN_DETERMINISTIC=0 asks for cuDNN's default
// (atomic dQ) algorithm instead.
#define CUDNN_FRONTEND_SKIP_JSON_LIB  // the project has its own nlohmann-json; keep the frontend's copy out
#include <cudnn_frontend.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Shape {
  int64_t B, T, H, K, D;
};

// Everything a built graph depends on; pointers are not part of it (cuDNN binds them per execution).
using Key = std::tuple<int /*device*/, bool /*backward*/, int64_t, int64_t, int64_t, int64_t, int64_t,
                       bool /*causal*/, uint32_t /*scale bits*/, int /*io dtype*/, bool /*deterministic asked*/>;

// MEGADLM_CUDNN_DETERMINISTIC: 1 (default) or 0, read once.
bool deterministic_wanted() {
  static const bool want = [] {
    const char* e = std::getenv("MEGADLM_CUDNN_DETERMINISTIC");
    const std::string v = e ? e : "1";
    MEGADLM_CHECK(v == "0" || v == "1", "MEGADLM_CUDNN_DETERMINISTIC=", v, " (want 0 or 1)");
    return v == "1";
  }();
  return want;
}

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN rejected the shape (see error)
  std::string error;
  int64_t workspace = 0;
  bool deterministic = false;
  bool reported = false;  // a decline is logged once per shape
};

struct State {
  std::mutex mu;
  std::unordered_map<int, cudnnHandle_t> handles;  // per device; kept for the life of the process
  std::unordered_map<int, std::string> handle_errors;  // devices where cudnnCreate failed (tried once)
  std::map<Key, Plan> plans;
};
State& state() {
  static State* s = new State;  // never destroyed: handles must not be torn down after the CUDA context
  return *s;
}

std::string describe(const Shape& s, bool causal) {
  return detail::concat("B=", s.B, " T=", s.T, " H=", s.H, " K=", s.K, " D=", s.D, causal ? " causal" : " bidirectional");
}

// The handle of the current device, created on first use. Returns null (and the reason) on failure; a
// failure is remembered and logged once (e.g. a libcudnn without its engine libraries beside it).
cudnnHandle_t handle_for(int device, std::string& why) {
  State& st = state();
  auto it = st.handles.find(device);
  if (it != st.handles.end()) return it->second;
  if (auto e = st.handle_errors.find(device); e != st.handle_errors.end()) {
    why = e->second;
    return nullptr;
  }
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t rc = cudnnCreate(&h);
  if (rc != CUDNN_STATUS_SUCCESS) {
    why = detail::concat("cudnnCreate failed on device ", device, ": ", cudnnGetErrorString(rc), " (cuDNN ",
                         cudnnGetVersion(), ")");
    log_info("cuDNN attention unavailable: ", why);
    st.handle_errors.emplace(device, why);
    return nullptr;
  }
  st.handles.emplace(device, h);
  return h;
}

// Logical dims {B, heads, T, D} over row-major [B, T, heads, D] memory.
std::vector<int64_t> bshd_dims(const Shape& s, int64_t heads) { return {s.B, heads, s.T, s.D}; }
std::vector<int64_t> bshd_strides(const Shape& s, int64_t heads) { return {s.T * heads * s.D, s.D, heads * s.D, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid, const Shape& s,
                                                    int64_t heads) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(bshd_dims(s, heads)).set_stride(
      bshd_strides(s, heads)));
}
void as_output(fe::graph::Tensor_attributes& t, Uid uid, const Shape& s, int64_t heads) {
  t.set_output(true).set_uid(uid).set_dim(bshd_dims(s, heads)).set_stride(bshd_strides(s, heads));
}
// lse / Stats: [B,H,T] fp32 seen as {B,H,T,1}.
std::vector<int64_t> stats_dims(const Shape& s) { return {s.B, s.H, s.T, 1}; }
std::vector<int64_t> stats_strides(const Shape& s) { return {s.H * s.T, s.T, 1, 1}; }

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  // bf16 in and out; scores, softmax and accumulators in fp32.
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const Shape& s, bool causal, float scale) {
  auto g = new_graph();
  auto q = input(*g, "q", kQ, s, s.H), k = input(*g, "k", kK, s, s.K), v = input(*g, "v", kV, s, s.K);
  auto opts = fe::graph::SDPA_attributes().set_name("sdpa_forward").set_generate_stats(true).set_attn_scale(scale);
  if (causal) opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [o, stats] = g->sdpa(q, k, v, opts);
  as_output(*o, kO, s, s.H);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims(s)).set_stride(
      stats_strides(s));
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Shape& s, bool causal, float scale, bool deterministic) {
  auto g = new_graph();
  auto q = input(*g, "q", kQ, s, s.H), k = input(*g, "k", kK, s, s.K), v = input(*g, "v", kV, s, s.K);
  auto o = input(*g, "o", kO, s, s.H), dout = input(*g, "dout", kDO, s, s.H);
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("lse")
                             .set_uid(kStats)
                             .set_data_type(fe::DataType_t::FLOAT)
                             .set_dim(stats_dims(s))
                             .set_stride(stats_strides(s)));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("sdpa_backward")
                  .set_attn_scale(scale)
                  .set_deterministic_algorithm(deterministic);
  if (causal) opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
  as_output(*dq, kDQ, s, s.H);
  as_output(*dk, kDK, s, s.K);  // under GQA cuDNN sums the H/K query heads of each kv head
  as_output(*dv, kDV, s, s.K);
  return g;
}

// validate -> operation graph -> heuristics (A, then the fallback list) -> support check -> plan.
// Returns cuDNN's message on the first failing step, empty on success.
std::string finalize(fe::graph::Graph& g, cudnnHandle_t handle, int64_t& workspace) {
  const auto step = [](fe::error_t e, const char* what) -> std::string {
    return e.is_good() ? std::string() : detail::concat(what, ": ", e.get_message());
  };
  std::string err;
  if (!(err = step(g.validate(), "validate")).empty()) return err;
  if (!(err = step(g.build_operation_graph(handle), "build_operation_graph")).empty()) return err;
  if (!(err = step(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans"))
           .empty())
    return err;
  if (!(err = step(g.check_support(), "check_support")).empty()) return err;
  if (!(err = step(g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans")).empty()) return err;
  return step(g.get_workspace_size(workspace), "get_workspace_size");
}

// The cached plan for this call, built on first use. Caller holds the state mutex.
Plan& plan_for(bool backward, const Shape& s, bool causal, float scale, cudnnHandle_t handle, int device) {
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  const bool want_det = backward && deterministic_wanted();
  const Key key{device, backward, s.B, s.T, s.H, s.K, s.D, causal, scale_bits, static_cast<int>(DType::BF16), want_det};
  auto& plans = state().plans;
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  Plan p;
  if (!backward) {
    p.graph = forward_graph(s, causal, scale);
    p.error = finalize(*p.graph, handle, p.workspace);
  } else {
    // Deterministic first (the backend's convention); cuDNN versions / shapes without it still run.
    std::string det_error;
    for (bool det : {true, false}) {
      if (det && !want_det) continue;
      p.graph = backward_graph(s, causal, scale, det);
      p.error = finalize(*p.graph, handle, p.workspace);
      p.deterministic = det;
      if (p.error.empty()) break;
      if (det) det_error = p.error;
    }
    if (p.error.empty() && !p.deterministic && want_det)
      log_info("cuDNN SDPA backward (", describe(s, causal), "): no deterministic algorithm (", det_error,
               "); using the default one, whose dQ is not bitwise reproducible");
    if (!p.error.empty() && want_det) p.error = detail::concat(det_error, "; without determinism: ", p.error);
  }
  if (!p.error.empty()) p.graph.reset();
  return plans.emplace(key, std::move(p)).first->second;
}

void cuda_check(cudaError_t rc, const char* who, const char* what) {
  if (rc != cudaSuccess) fail(who, ": ", what, " failed: ", cudaGetErrorString(rc));
}

// Runs the forward or backward graph on the tensors of `pack`. Returns false without launching anything
// when cuDNN cannot take the call and `required` is false (Auto: the caller falls back); throws Error
// naming the shape and cuDNN's message when `required` (AttentionImpl::Cudnn) or when execution fails.
bool run(bool backward, const Shape& s, bool causal, float scale, std::unordered_map<int64_t, void*> pack,
         bool required, cudaStream_t stream) {
  const char* who = backward ? "cuda attention_backward (cuDNN SDPA)" : "cuda attention_forward (cuDNN SDPA)";
  const auto decline = [&](const std::string& why) {
    MEGADLM_CHECK(!required, who, ": cuDNN cannot run ", describe(s, causal), ": ", why,
                  " (MEGADLM_ATTENTION=flash or gemm selects another implementation)");
    return false;
  };
  // cuDNN reads rows in 16-byte vectors: D * 2 bytes and every base pointer must be multiples of 16.
  if (s.D % 8 != 0) return decline(detail::concat("head dim D=", s.D, " is not a multiple of 8"));
  for (const auto& [uid, ptr] : pack)
    if (uid != kStats && reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      return decline(detail::concat("tensor ", uid, " is not 16-byte aligned"));

  State& st = state();
  const std::lock_guard<std::mutex> lock(st.mu);
  int device = 0;
  cuda_check(cudaGetDevice(&device), who, "cudaGetDevice");
  std::string why;
  const cudnnHandle_t handle = handle_for(device, why);
  if (!handle) return decline(why);
  Plan& p = plan_for(backward, s, causal, scale, handle, device);
  if (!p.graph) {
    if (!required && !p.reported)
      log_info(who, ": cuDNN declined ", describe(s, causal), " (", p.error, "); using the flash / cuBLASLt path");
    p.reported = true;
    return decline(p.error);
  }
  const cudnnStatus_t rc = cudnnSetStream(handle, stream);
  MEGADLM_CHECK(rc == CUDNN_STATUS_SUCCESS, who, ": cudnnSetStream failed: ", cudnnGetErrorString(rc));
  void* workspace = p.workspace > 0 ? device_alloc_async(static_cast<size_t>(p.workspace), stream) : nullptr;
  fe::error_t e = p.graph->execute(handle, pack, workspace);
  device_free_async(workspace, stream);
  MEGADLM_CHECK(e.is_good(), who, ": execute failed for ", describe(s, causal), ": ", e.get_message());
  return true;
}

void* mut(const void* p) { return const_cast<void*>(p); }  // cuDNN's variant pack is untyped; it only reads inputs

}  // namespace

// Called by attention.cu (declared there): bf16 only, masks None (causal = false) or Causal.
bool attention_cudnn_forward(bf16_t* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, int64_t B,
                             int64_t Tn, int64_t H, int64_t K, int64_t D, bool causal, float scale, bool required,
                             cudaStream_t stream) {
  return run(false, Shape{B, Tn, H, K, D}, causal, scale,
             {{kQ, mut(q)}, {kK, mut(k)}, {kV, mut(v)}, {kO, out}, {kStats, lse}}, required, stream);
}

bool attention_cudnn_backward(bf16_t* dq, bf16_t* dk, bf16_t* dv, const bf16_t* dout, const bf16_t* q, const bf16_t* k,
                              const bf16_t* v, const bf16_t* out, const float* lse, int64_t B, int64_t Tn, int64_t H,
                              int64_t K, int64_t D, bool causal, float scale, bool required, cudaStream_t stream) {
  return run(true, Shape{B, Tn, H, K, D}, causal, scale,
             {{kQ, mut(q)},
              {kK, mut(k)},
              {kV, mut(v)},
              {kO, mut(out)},
              {kDO, mut(dout)},
              {kStats, mut(lse)},
              {kDQ, dq},
              {kDK, dk},
              {kDV, dv}},
             required, stream);
}

}  // namespace megadlm::cuda
