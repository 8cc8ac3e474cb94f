// LayerNorm and RMSNorm with an optional fused residual add, forward and backward.
// Contract: kernels/cuda/ops.h (kernels/cpu/norm.h plus the residual).
//
// Fast path (row lengths of 8, 16 or 32 x {1,2,3,4,6,8,12,16} 16-byte packs, 16-byte aligned rows and
// parameters): a
// group of L lanes owns one row, I packs per lane, the row held in registers (two-pass statistics as on the
// CPU, without re-reading memory). Its backward also sums the weight / bias gradients: each lane adds up
// its own columns over the rows its group walks, the groups of a block add theirs in group order, and a
// second kernel adds the block partials in a fixed order (colreduce.cuh): no atomics, the same bits on
// every run. The row in registers spares the general path's second read of the row from memory
// (docs/bench/decisions.md has the timings).
//
// General path (any other row): one block per row, the row staged in shared memory as fp32; weight and
// bias gradients are separate column sums (colreduce.cuh).
#include "kernels/cuda/colreduce.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/row_groups.cuh"

namespace megadlm::cuda {

namespace {

constexpr int64_t kMaxC = 12032;  // the fp32 row (+ scratch) in shared memory stays under the 48 KiB default

int threads_for(int64_t C) { return C >= 2048 ? 256 : (C >= 512 ? 128 : 32); }

// x (fp32, shared) = inp + residual for one row; also written to sum_out when set.
template <typename T, bool kVec>
__device__ void stage_row(float* x, const T* inp, const T* residual, T* sum_out, int64_t C) {
  constexpr int kN = kVec ? Pack<T>::kN : 1;
  for (int64_t i = threadIdx.x * kN; i < C; i += blockDim.x * kN) {
    T a[kN], r[kN];
    if constexpr (kVec) *reinterpret_cast<Pack<T>*>(a) = load_pack(inp + i);
    else a[0] = inp[i];
    if (residual) {
      if constexpr (kVec) *reinterpret_cast<Pack<T>*>(r) = load_pack(residual + i);
      else r[0] = residual[i];
#pragma unroll
      for (int j = 0; j < kN; ++j) a[j] = from_f32<T>(to_f32(a[j]) + to_f32(r[j]));  // rounded like the stream
      if (sum_out) {
        if constexpr (kVec) store_pack(sum_out + i, *reinterpret_cast<Pack<T>*>(a));
        else sum_out[i] = a[0];
      }
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) x[i + j] = to_f32(a[j]);
  }
}

template <typename T, bool kVec, bool kRms>
__global__ void norm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp, const T* residual,
                                    T* sum_out, const float* weight, const float* bias, int64_t C, float eps) {
  extern __shared__ float x[];
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  inp += row * C;
  out += row * C;
  if (residual) residual += row * C;
  if (sum_out) sum_out += row * C;
  stage_row<T, kVec>(x, inp, residual, sum_out, C);
  __syncthreads();
  float mean = 0.0f;
  if constexpr (!kRms) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += x[i];
    mean = block_sum(s, scratch) / static_cast<float>(C);
  }
  float s2 = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = x[i] - mean;
    s2 += d * d;
  }
  const float rstd = rsqrtf(block_sum(s2, scratch) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  constexpr int kN = kVec ? Pack<T>::kN : 1;
  for (int64_t i = threadIdx.x * kN; i < C; i += blockDim.x * kN) {
    T o[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float y = (x[i + j] - mean) * rstd * weight[i + j] + (bias ? bias[i + j] : 0.0f);
      o[j] = from_f32<T>(y);
    }
    if constexpr (kVec) store_pack(out + i, *reinterpret_cast<Pack<T>*>(o));
    else out[i] = o[0];
  }
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight (RMSNorm: no mean(g) term
// and xhat = x * rstd), plus dresidual.
template <typename T, bool kRms>
__global__ void norm_backward_kernel(T* dinp, const T* dout, const T* inp, const float* weight, const float* mean_in,
                                     const float* rstd_in, const T* dresidual, int64_t C) {
  extern __shared__ float g[];
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  dout += row * C;
  inp += row * C;
  dinp += row * C;
  if (dresidual) dresidual += row * C;
  const float mean = kRms ? 0.0f : mean_in[row];
  const float rstd = rstd_in[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float gi = to_f32(dout[i]) * weight[i];
    g[i] = gi;
    sg += gi;
    sgx += gi * (to_f32(inp[i]) - mean) * rstd;
  }
  const float inv_c = 1.0f / static_cast<float>(C);
  const float mg = kRms ? 0.0f : block_sum(sg, scratch) * inv_c;
  const float mgx = block_sum(sgx, scratch) * inv_c;  // also orders the g[] writes before the reads below
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float xhat = (to_f32(inp[i]) - mean) * rstd;
    float d = rstd * (g[i] - mg - xhat * mgx);
    if (dresidual) d += to_f32(dresidual[i]);
    dinp[i] = from_f32<T>(d);
  }
}

// dweight[c] += dout[n,c] * xhat[n,c]
template <typename T>
struct WeightGrad {
  const T* dout;
  const T* inp;
  const float* mean;  // null for RMSNorm
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    const float m = mean ? mean[n] : 0.0f;
    return to_f32(dout[n * C + c]) * (to_f32(inp[n * C + c]) - m) * rstd[n];
  }
};
template <typename T>
struct ReadCol {
  const T* x;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return to_f32(x[n * C + c]); }
};

// ---- fast path: L lanes per row, I packs of 16 bytes per lane (row_groups.cuh) ----------------------------

template <typename T, int L, int I, bool kRms>
__global__ void __launch_bounds__(kRowThreads)
    norm_forward_rows_kernel(T* out, float* mean_out, float* rstd_out, const T* inp, const T* residual, T* sum_out,
                             const float* weight, const float* bias, int64_t N, float eps) {
  constexpr int kV = Pack<T>::kN, kC = L * I * kV;
  const int lg = threadIdx.x % L;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowThreads / L) + threadIdx.x / L;
  const bool valid = row < N;  // every lane still takes part in the group's shuffles
  float x[I][kV];
#pragma unroll
  for (int i = 0; i < I; ++i) {
    const int64_t at = row * kC + pack_col<T, L>(i, lg);
    Pack<T> a{};
    if (valid) {
      a = load_pack(inp + at);
      if (residual) {
        const Pack<T> r = load_pack(residual + at);
#pragma unroll
        for (int j = 0; j < kV; ++j) a.v[j] = from_f32<T>(to_f32(a.v[j]) + to_f32(r.v[j]));  // rounded like the stream
        if (sum_out) store_pack(sum_out + at, a);
      }
    }
#pragma unroll
    for (int j = 0; j < kV; ++j) x[i][j] = valid ? to_f32(a.v[j]) : 0.0f;
  }
  float mean = 0.0f;
  if constexpr (!kRms) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < I; ++i)
#pragma unroll
      for (int j = 0; j < kV; ++j) s += x[i][j];
    mean = group_sum<L>(s) / static_cast<float>(kC);
  }
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < I; ++i)
#pragma unroll
    for (int j = 0; j < kV; ++j) s2 += (x[i][j] - mean) * (x[i][j] - mean);
  const float rstd = rsqrtf(group_sum<L>(s2) / static_cast<float>(kC) + eps);
  if (!valid) return;
  if (lg == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
#pragma unroll
  for (int i = 0; i < I; ++i) {
    const int c = pack_col<T, L>(i, lg);
    float w[kV], b[kV] = {};
    load_floats<kV>(w, weight + c);
    if (bias) load_floats<kV>(b, bias + c);
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < kV; ++j) o.v[j] = from_f32<T>((x[i][j] - mean) * rstd * w[j] + b[j]);
    store_pack(out + row * kC + c, o);
  }
}

// Each group walks rows_per_group consecutive rows. dinp as norm_backward_kernel below; the weight (and
// bias) gradient sums of the block go to partial_w / partial_b [gridDim.x, kC].
// RMSNorm: two blocks per multiprocessor at least, which caps the registers: at the ~130 registers the
// compiler otherwise takes for a 2048-wide bf16 row only one block (8 warps) fits per multiprocessor,
// which is slower (docs/bench/decisions.md). (LayerNorm's bias sums need more registers than that.)
template <typename T, int L, int I, bool kRms>
__global__ void __launch_bounds__(kRowThreads, kRms ? 2 : 1)
    norm_backward_rows_kernel(T* dinp, float* partial_w, float* partial_b, const T* dout, const T* inp,
                              const float* weight, const float* mean_in, const float* rstd_in, const T* dresidual,
                              int64_t N, int64_t rows_per_group) {
  constexpr int kV = Pack<T>::kN, kC = L * I * kV, kGroups = kRowThreads / L;
  const int lg = threadIdx.x % L, group = threadIdx.x / L;
  float acc_w[I][kV], acc_b[I][kV];
#pragma unroll
  for (int i = 0; i < I; ++i)
#pragma unroll
    for (int j = 0; j < kV; ++j) acc_w[i][j] = 0.0f, acc_b[i][j] = 0.0f;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(kGroups) + group) * rows_per_group;
  for (int64_t k = 0; k < rows_per_group; ++k) {  // the same trip count in every group: shuffles stay converged
    const int64_t row = first + k;
    const bool valid = row < N;
    const float mean = (!kRms && valid) ? mean_in[row] : 0.0f;
    const float rstd = valid ? rstd_in[row] : 0.0f;
    // Pass 1: the row sums, and this lane's columns of the parameter gradients.
    float sg = 0.0f, sgx = 0.0f;
    if (valid) {
#pragma unroll
      for (int i = 0; i < I; ++i) {
        const int c = pack_col<T, L>(i, lg);
        const Pack<T> d = load_pack(dout + row * kC + c), a = load_pack(inp + row * kC + c);
        float w[kV];
        load_floats<kV>(w, weight + c);
#pragma unroll
        for (int j = 0; j < kV; ++j) {
          const float dy = to_f32(d.v[j]), xhat = (to_f32(a.v[j]) - mean) * rstd, g = dy * w[j];
          sg += g, sgx += g * xhat;
          acc_w[i][j] += dy * xhat;
          if (!kRms) acc_b[i][j] += dy;
        }
      }
    }
    const float inv_c = 1.0f / static_cast<float>(kC);
    const float mg = kRms ? 0.0f : group_sum<L>(sg) * inv_c;
    const float mgx = group_sum<L>(sgx) * inv_c;
    if (!valid) continue;
    // Pass 2: dinp, re-reading the row (from cache).
#pragma unroll
    for (int i = 0; i < I; ++i) {
      const int c = pack_col<T, L>(i, lg);
      const int64_t at = row * kC + c;
      const Pack<T> d = load_pack(dout + at), a = load_pack(inp + at);
      Pack<T> r{};
      if (dresidual) r = load_pack(dresidual + at);
      float w[kV];
      load_floats<kV>(w, weight + c);
      Pack<T> o;
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float xhat = (to_f32(a.v[j]) - mean) * rstd, g = to_f32(d.v[j]) * w[j];
        o.v[j] = from_f32<T>(rstd * (g - mg - xhat * mgx) + (dresidual ? to_f32(r.v[j]) : 0.0f));
      }
      store_pack(dinp + at, o);
    }
  }
  // The block's partial, its groups' sums added in group order.
  __shared__ float sw[kC], sb[kRms ? 1 : kC];
  add_groups_in_order(group, kGroups, [&](bool first) {
#pragma unroll
    for (int i = 0; i < I; ++i)
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const int c = pack_col<T, L>(i, lg) + j;
        sw[c] = (first ? 0.0f : sw[c]) + acc_w[i][j];
        if (!kRms) sb[c] = (first ? 0.0f : sb[c]) + acc_b[i][j];
      }
  });
  for (int c = threadIdx.x; c < kC; c += kRowThreads) {
    partial_w[blockIdx.x * static_cast<int64_t>(kC) + c] = sw[c];
    if (!kRms && partial_b) partial_b[blockIdx.x * static_cast<int64_t>(kC) + c] = sb[c];
  }
}

template <typename T, bool kRms>
void norm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias, int64_t N,
                  int64_t C, float eps, const T* residual, T* sum_out, cudaStream_t stream) {
  if (N <= 0) return;
  MEGADLM_CHECK(C > 0 && C <= kMaxC, "cuda norm: C = ", C, " outside the supported 1..", kMaxC);
  using D = Dev<T>;
  const bool vec = vec_ok<D>(C, {out, inp, residual, sum_out});
  if (vec && vec_ok<float>(C, {weight, bias}) && with_row_shape<D>(C, [&](auto l, auto i) {
        constexpr int L = decltype(l)::value, I = decltype(i)::value;
        const int64_t rows_per_block = kRowThreads / L;
        norm_forward_rows_kernel<D, L, I, kRms>
            <<<static_cast<unsigned>((N + rows_per_block - 1) / rows_per_block), kRowThreads, 0, stream>>>(
                dev(out), mean, rstd, dev(inp), dev(residual), dev(sum_out), weight, bias, N, eps);
      })) {
    MEGADLM_CUDA_LAUNCH_CHECK();
    return;
  }
  const size_t smem = C * sizeof(float);
  const int threads = threads_for(C);
  if (vec)
    norm_forward_kernel<D, true, kRms><<<static_cast<unsigned>(N), threads, smem, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(residual), dev(sum_out), weight, bias, C, eps);
  else
    norm_forward_kernel<D, false, kRms><<<static_cast<unsigned>(N), threads, smem, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(residual), dev(sum_out), weight, bias, C, eps);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template <typename T, bool kRms>
void norm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C, const T* dresidual, cudaStream_t stream) {
  if (N <= 0) return;
  MEGADLM_CHECK(C > 0 && C <= kMaxC, "cuda norm backward: C = ", C, " outside the supported 1..", kMaxC);
  using D = Dev<T>;
  if (vec_ok<D>(C, {dinp, dout, inp, dresidual}) && vec_ok<float>(C, {weight}) && with_row_shape<D>(C, [&](auto l, auto i) {
        constexpr int L = decltype(l)::value, I = decltype(i)::value;
        const auto [rows_per_group, blocks] = group_walk(N, kRowThreads / L);
        float* partial = stream_alloc<float>(blocks * C * (dbias ? 2 : 1), stream);
        float* partial_b = dbias ? partial + blocks * C : nullptr;
        // dinp may alias dout: each group reads a row in full before writing it, and no other group reads it.
        norm_backward_rows_kernel<D, L, I, kRms><<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(
            dev(dinp), partial, partial_b, dev(dout), dev(inp), weight, mean, rstd, dev(dresidual), N, rows_per_group);
        MEGADLM_CUDA_LAUNCH_CHECK();
        col_finish(dweight, partial, blocks, C, stream);
        if (dbias) col_finish(dbias, partial_b, blocks, C, stream);
        MEGADLM_CUDA_CHECK(cudaFreeAsync(partial, stream));
      }))
    return;
  // Parameter gradients first: dinp may alias dout.
  column_sum_accumulate(dweight, N, C, WeightGrad<D>{dev(dout), dev(inp), kRms ? nullptr : mean, rstd, C}, stream);
  if (dbias) column_sum_accumulate(dbias, N, C, ReadCol<D>{dev(dout), C}, stream);
  norm_backward_kernel<D, kRms><<<static_cast<unsigned>(N), threads_for(C), C * sizeof(float), stream>>>(
      dev(dinp), dev(dout), dev(inp), weight, mean, rstd, dev(dresidual), C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, float eps, const T* residual, T* sum_out, cudaStream_t stream) {
  norm_forward<T, false>(out, mean, rstd, inp, weight, bias, N, C, eps, residual, sum_out, stream);
}
template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, const T* dresidual,
                        cudaStream_t stream) {
  norm_backward<T, false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dresidual, stream);
}
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t N, int64_t C, float eps,
                     const T* residual, T* sum_out, cudaStream_t stream) {
  norm_forward<T, true>(out, nullptr, rstd, inp, weight, nullptr, N, C, eps, residual, sum_out, stream);
}
template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const float* weight, const float* rstd,
                      int64_t N, int64_t C, const T* dresidual, cudaStream_t stream) {
  norm_backward<T, true>(dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C, dresidual, stream);
}

#define MEGADLM_INSTANTIATE(T)                                                                                      \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const float*, const float*, int64_t, int64_t, \
                                     float, const T*, T*, cudaStream_t);                                         \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const float*, const float*,        \
                                      const float*, int64_t, int64_t, const T*, cudaStream_t);                   \
  template void rmsnorm_forward<T>(T*, float*, const T*, const float*, int64_t, int64_t, float, const T*, T*,    \
                                   cudaStream_t);                                                                \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const float*, const float*, int64_t, int64_t, \
                                    const T*, cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
