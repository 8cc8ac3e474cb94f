#pragma once
// Communicator: the collectives one parallel group needs, behind one interface. MPI implements it on
// CPUs (parallel/mpi_communicator.*), NCCL on GPUs (kernels/cuda/nccl_communicator.*). A group of size 1 is a SelfCommunicator whose
// collectives are copies, so single-process code runs the same calls at no cost.
//
// Every collective is blocking except all_reduce_sum_async, which data parallelism uses to overlap the
// gradient reduction of one bucket with the backward of the next. Counters record the bytes this rank
// sends and the seconds it spends inside communication calls, per group, for the training log.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace megadlm {

struct CommStats {
  double bytes_sent = 0;  // payload bytes this rank handed to the network (ring estimate for collectives)
  double seconds = 0;     // wall time spent inside calls (including waits on async handles)
  int64_t calls = 0;
};

// Counts one call and its bytes in `stats`, and the wall time until it goes out of scope.
struct CommTimer {
  static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  CommStats& s;
  double t0 = now_s();
  CommTimer(CommStats& stats, double bytes) : s(stats) {
    s.bytes_sent += bytes;
    ++s.calls;
  }
  ~CommTimer() { s.seconds += now_s() - t0; }
};

// An outstanding non-blocking operation; wait() completes it. Default-constructed = nothing pending.
class CommRequest {
 public:
  CommRequest() = default;
  explicit CommRequest(std::shared_ptr<void> impl) : impl_(std::move(impl)) {}
  bool pending() const { return impl_ != nullptr; }
  std::shared_ptr<void>& impl() { return impl_; }

 private:
  std::shared_ptr<void> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  int size() const { return size_; }
  int rank() const { return rank_; }
  const std::string& name() const { return name_; }  // "tp", "dp", ... for the log
  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }

  // In place: data[n] <- sum over ranks.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_max(float* data, int64_t n) = 0;
  // Starts an in-place sum; the data must not be touched until wait(req).
  virtual CommRequest all_reduce_sum_async(float* data, int64_t n) = 0;
  virtual void wait(CommRequest& req) = 0;
  // in[size * n] -> out[n]: rank r gets the sum of every rank's chunk r.
  virtual void reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
  // in[n] -> out[size * n]: chunk r of out is rank r's in.
  virtual void all_gather(const float* in, float* out, int64_t n) = 0;
  // Bytes from root to every rank.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Point to point (pipeline stages). Blocking; tags keep micro-batches apart.
  virtual void send(const void* data, int64_t bytes, int dst, int tag) = 0;
  virtual void recv(void* data, int64_t bytes, int src, int tag) = 0;
  // Non-blocking exchange (context parallelism's ring): send_bytes of `send` to dst and recv_bytes from
  // src into `recv`, both under `tag`; neither buffer may be touched until wait(req). Every rank of a
  // ring posts one, so no ordering between the halves is needed. Communicators that do not implement
  // it throw.
  virtual CommRequest send_recv_async(const void* send, int64_t send_bytes, int dst, void* recv, int64_t recv_bytes,
                                      int src, int tag);
  // Variable all-to-all (expert parallelism): send_counts[size] / recv_counts[size] in floats; the
  // chunks are laid out in rank order in send[] and recv[].
  virtual void all_to_all_v(const float* send, const int64_t* send_counts, float* recv,
                            const int64_t* recv_counts) = 0;
  virtual void barrier() = 0;

 protected:
  Communicator(int size, int rank, std::string name) : size_(size), rank_(rank), name_(std::move(name)) {}
  int size_ = 1, rank_ = 0;
  std::string name_;
  CommStats stats_;
};

// A group of one: every collective leaves the data as the identity requires (copies where in != out).
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name = "self") : Communicator(1, 0, std::move(name)) {}
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  CommRequest all_reduce_sum_async(float*, int64_t) override { return {}; }
  void wait(CommRequest& req) override { req = CommRequest(); }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  void all_gather(const float* in, float* out, int64_t n) override;
  void broadcast(void*, int64_t, int) override {}
  void send(const void*, int64_t, int dst, int) override;
  void recv(void*, int64_t, int src, int) override;
  CommRequest send_recv_async(const void* send, int64_t send_bytes, int dst, void* recv, int64_t recv_bytes, int src,
                              int tag) override;
  void all_to_all_v(const float* send, const int64_t* send_counts, float* recv, const int64_t* recv_counts) override;
  void barrier() override {}
};

}  // namespace megadlm
