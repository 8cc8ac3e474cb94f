// NCCL implementation of the Communicator interface; see nccl_communicator.h.
#include "kernels/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace megadlm::cuda {

namespace {

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) fail("NCCL ", what, " failed: ", ncclGetErrorString(rc));
}
void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) fail("NCCL communicator: ", what, " failed: ", cudaGetErrorString(rc));
}

struct PendingEvent {
  cudaEvent_t event = nullptr;
  ~PendingEvent() {
    if (event) cudaEventDestroy(event);
  }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int size, int rank, std::string name, const ncclUniqueId& id) : Communicator(size, rank, std::move(name)) {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming), "cudaEventCreate");
    nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    if (inputs_ready_) cudaEventDestroy(inputs_ready_);
    if (barrier_buf_) cudaFree(barrier_buf_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  double ring(double bytes, double factor) const { return size_ > 1 ? factor * bytes * (size_ - 1) / size_ : 0; }

  void all_reduce_sum(float* data, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n, 2));
    after_compute();
    nccl_check(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_), "AllReduce");
    sync();
  }
  void all_reduce_sum(double* data, int64_t n) override {
    CommTimer t(stats_, ring(8.0 * n, 2));
    after_compute();
    nccl_check(ncclAllReduce(data, data, n, ncclFloat64, ncclSum, comm_, stream_), "AllReduce");
    sync();
  }
  void all_reduce_max(float* data, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n, 2));
    after_compute();
    nccl_check(ncclAllReduce(data, data, n, ncclFloat32, ncclMax, comm_, stream_), "AllReduce");
    sync();
  }
  CommRequest all_reduce_sum_async(float* data, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n, 2));
    after_compute();
    nccl_check(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_), "AllReduce");
    return record_pending();
  }
  void wait(CommRequest& r) override {
    if (!r.pending()) return;
    CommTimer t(stats_, 0);
    --stats_.calls;  // the wait belongs to the call that started it
    auto ev = std::static_pointer_cast<PendingEvent>(r.impl());
    cuda_check(cudaEventSynchronize(ev->event), "cudaEventSynchronize");
    r = CommRequest();
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n * size_, 1));
    after_compute();
    nccl_check(ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, comm_, stream_), "ReduceScatter");
    sync();
  }
  void all_gather(const float* in, float* out, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n * size_, 1));
    after_compute();
    nccl_check(ncclAllGather(in, out, n, ncclFloat32, comm_, stream_), "AllGather");
    sync();
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    CommTimer t(stats_, rank_ == root ? static_cast<double>(bytes) : 0.0);
    after_compute();
    nccl_check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "Broadcast");
    sync();
  }
  void send(const void* data, int64_t bytes, int dst, int) override {
    CommTimer t(stats_, static_cast<double>(bytes));
    after_compute();
    nccl_check(ncclSend(data, bytes, ncclUint8, dst, comm_, stream_), "Send");
    sync();
  }
  void recv(void* data, int64_t bytes, int src, int) override {
    CommTimer t(stats_, 0);
    after_compute();
    nccl_check(ncclRecv(data, bytes, ncclUint8, src, comm_, stream_), "Recv");
    sync();
  }
  // One grouped send and receive on the communicator's stream; wait() synchronises on its event, so
  // the backend's kernels queued meanwhile (the ring's compute) overlap it. The tag is ignored (NCCL
  // orders the traffic per peer; every rank of the ring posts its exchanges in the same order).
  CommRequest send_recv_async(const void* send, int64_t send_bytes, int dst, void* recv, int64_t recv_bytes, int src,
                              int) override {
    CommTimer t(stats_, static_cast<double>(send_bytes));
    after_compute();
    nccl_check(ncclGroupStart(), "GroupStart");
    nccl_check(ncclSend(send, send_bytes, ncclUint8, dst, comm_, stream_), "Send");
    nccl_check(ncclRecv(recv, recv_bytes, ncclUint8, src, comm_, stream_), "Recv");
    nccl_check(ncclGroupEnd(), "GroupEnd");
    return record_pending();
  }
  void all_to_all_v(const float* send, const int64_t* send_counts, float* recv, const int64_t* recv_counts) override {
    double sent = 0;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) sent += 4.0 * send_counts[r];
    CommTimer t(stats_, sent);
    after_compute();
    // Grouped point-to-point: NCCL's all-to-all-v idiom.
    nccl_check(ncclGroupStart(), "GroupStart");
    int64_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      if (send_counts[r] > 0) nccl_check(ncclSend(send + so, send_counts[r], ncclFloat32, r, comm_, stream_), "Send");
      if (recv_counts[r] > 0) nccl_check(ncclRecv(recv + ro, recv_counts[r], ncclFloat32, r, comm_, stream_), "Recv");
      so += send_counts[r];
      ro += recv_counts[r];
    }
    nccl_check(ncclGroupEnd(), "GroupEnd");
    sync();
  }
  void barrier() override {
    // An all-reduce of one float is NCCL's barrier.
    CommTimer t(stats_, 0);
    if (!barrier_buf_) cuda_check(cudaMalloc(&barrier_buf_, sizeof(float)), "cudaMalloc");
    nccl_check(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_), "AllReduce");
    sync();
  }

 private:
  void sync() { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  // A request that completes with the work queued on the stream so far.
  CommRequest record_pending() {
    auto ev = std::make_shared<PendingEvent>();
    cuda_check(cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ev->event, stream_), "cudaEventRecord");
    return CommRequest(std::static_pointer_cast<void>(ev));
  }
  // The backend's kernels run on the legacy default stream, which a non-blocking stream does not wait
  // for: the collective's stream waits for everything queued there so far (the gradients the backward
  // just wrote), without making later kernels wait for the collective (so a bucket's all-reduce
  // overlaps the rest of the backward).
  void after_compute() {
    cuda_check(cudaEventRecord(inputs_ready_, cudaStreamLegacy), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, inputs_ready_, 0), "cudaStreamWaitEvent");
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* barrier_buf_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, const std::string& name) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) nccl_check(ncclGetUniqueId(&id), "GetUniqueId");
  bootstrap.broadcast(&id, sizeof(id), 0);
  return std::make_shared<NcclCommunicator>(bootstrap.size(), bootstrap.rank(), name, id);
}

std::string nccl_version() {
  int v = 0;
  nccl_check(ncclGetVersion(&v), "GetVersion");
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void register_nccl_communicator() { register_device_communicator(Device::CUDA, make_nccl_communicator); }

}  // namespace megadlm::cuda
