#pragma once
// Micro-batches for training, in Megatron's sampler order: with data-parallel size P and micro-batch
// size B, micro-batch k of rank r holds the samples
//     consumed_samples + k * B * P + r * B + b,   b in [0, B)
// so the stream is a pure function of consumed_samples (a resumed run continues exactly where the
// checkpoint stopped) and each global batch is split across ranks without overlap.
//
// With prefetch on, a background thread assembles micro-batch k + 1 while the trainer works on k; the
// batches are identical either way (the thread only changes when they are built).
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/sample_batch.h"
#include "data/token_dataset.h"

namespace megadlm {

struct LoaderConfig {
  int64_t micro_batch_size = 1;   // B
  int64_t consumed_samples = 0;   // where the stream starts (from a checkpoint)
  int64_t dp_rank = 0, dp_size = 1;
  bool prefetch = true;
};

class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const TokenDataset> dataset, const LoaderConfig& config);
  ~BatchLoader();  // stops and joins the prefetch thread
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next micro-batch of this rank. Throws Error when it would run past the end of the dataset
  // (naming the sample index), or rethrows what the prefetch thread hit.
  SampleBatch next();

  // Number of micro-batches this rank has taken so far.
  int64_t micro_batches_taken() const { return taken_; }
  // consumed_samples after the micro-batches taken so far, counting whole data-parallel rounds.
  int64_t consumed_samples() const;

 private:
  void build(int64_t k, SampleBatch& out) const;  // micro-batch number k since the start
  void prefetch_loop();

  std::shared_ptr<const TokenDataset> dataset_;
  LoaderConfig config_;
  int64_t taken_ = 0;

  // Prefetch state: the thread fills `ready_` with micro-batch `ready_k_`.
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, has_ready_ = false;
  int64_t ready_k_ = -1;
  SampleBatch ready_;
  std::exception_ptr error_;
};

}  // namespace megadlm
