#include "parallel/tp_mappings.h"

#include <algorithm>
#include <vector>

#include "core/device_memory.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

int64_t local_rows(const ParallelContext& ctx, int64_t N) {
  if (!sequence_parallel(ctx)) return N;
  MEGADLM_CHECK(N % ctx.tp.size == 0, "--sequence-parallel: the micro-batch's ", N,
                " tokens (micro-batch size x sequence length) are not divisible by --tensor-model-parallel-size ",
                ctx.tp.size);
  return N / ctx.tp.size;
}

// A device's staging buffer: grown, never shrunk, kept until exit (not freed by a static destructor,
// which would run after the device's runtime or memory table may have gone).
namespace {
struct DeviceScratch {
  Device device = Device::CPU;
  void* p = nullptr;
  size_t bytes = 0;
};
}  // namespace

float* tp_scratch(int64_t n, int slot, Device device) {
  // Only the main thread communicates (MPI FUNNELED), so these buffers are never shared between threads.
  if (device == Device::CPU) {
    static std::vector<float> buffers[4];
    std::vector<float>& b = buffers[slot];
    if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
    return b.data();
  }
  static DeviceScratch buffers[4];
  DeviceScratch& b = buffers[slot];
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  MEGADLM_CHECK(b.p == nullptr || b.device == device, "tp staging buffers on two devices");
  if (b.bytes < bytes) {
    const DeviceMemory& m = device_memory(device);
    backend_for(device).synchronize();  // the old buffer may still be read by queued kernels
    m.free(b.p);
    b.p = nullptr;  // not left dangling should the allocation throw
    b.p = m.alloc(bytes);
    b.bytes = bytes;
    b.device = device;
  }
  return static_cast<float*>(b.p);
}

static Tensor gather_into(const ParallelContext& ctx, const Tensor& x, float* out) {
  const int64_t rows = x.size(0), C = x.numel() / rows;
  ctx.tp.communicator(x.device()).all_gather(x.data<float>(), out, x.numel());
  return Tensor::borrow(out, {rows * ctx.tp.size, C}, DType::F32, x.device());
}

Tensor gather_rows(Arena& arena, const ParallelContext& ctx, const Tensor& x) {
  if (!sequence_parallel(ctx)) return x;
  Tensor out = arena.tensor({x.size(0) * ctx.tp.size, x.numel() / x.size(0)});
  gather_into(ctx, x, out.data<float>());
  return out;
}

Tensor gather_rows_scratch(const ParallelContext& ctx, const Tensor& x, int slot) {
  if (!sequence_parallel(ctx)) return x;
  return gather_into(ctx, x, tp_scratch(x.numel() * ctx.tp.size, slot, x.device()));
}

void reduce_rows(const ParallelContext& ctx, Tensor& partial, Tensor& dx, bool accumulate) {
  const int64_t n = partial.numel();
  const Device dev = partial.device();
  const Backend& be = backend_for(dev);
  Communicator& comm = ctx.tp.communicator(dev);
  float* p = partial.data<float>();
  float* d = dx.data<float>();
  if (sequence_parallel(ctx)) {
    const int64_t local = n / ctx.tp.size;
    MEGADLM_CHECK(dx.numel() == local, "reduce_rows: ", dx.numel(), " output elements for ", n, " over ", ctx.tp.size,
                  " ranks");
    float* out = accumulate ? tp_scratch(local, 3, dev) : d;
    comm.reduce_scatter_sum(p, out, local);
    if (accumulate) be.add_inplace(d, out, local);
    return;
  }
  MEGADLM_CHECK(dx.numel() == n, "reduce_rows: ", dx.numel(), " output elements for ", n);
  if (ctx.tp.size > 1) comm.all_reduce_sum(p, n);
  if (accumulate) {
    be.add_inplace(d, p, n);
  } else if (p != d) {
    be.copy(d, p, sizeof(float) * static_cast<size_t>(n));
  }
}

Tensor reduce_rows(Arena& arena, const ParallelContext& ctx, Tensor& y) {
  if (!sequence_parallel(ctx)) {
    tp_all_reduce_sum(ctx, y.data<float>(), y.numel(), y.device());
    return y;
  }
  const int64_t rows = local_rows(ctx, y.size(0)), C = y.numel() / y.size(0);
  Tensor out = arena.tensor({rows, C});
  ctx.tp.communicator(y.device()).reduce_scatter_sum(y.data<float>(), out.data<float>(), out.numel());
  return out;
}

}  // namespace megadlm
