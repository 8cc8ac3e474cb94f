#include "data/loader.h"

#include "core/error.h"

namespace megadlm {

BatchLoader::BatchLoader(std::shared_ptr<const TokenDataset> dataset, const LoaderConfig& config)
    : dataset_(std::move(dataset)), config_(config) {
  MEGADLM_CHECK(dataset_ != nullptr, "BatchLoader: no dataset");
  MEGADLM_CHECK(config_.micro_batch_size >= 1, "--micro-batch-size ", config_.micro_batch_size, " must be at least 1");
  MEGADLM_CHECK(config_.dp_size >= 1 && config_.dp_rank >= 0 && config_.dp_rank < config_.dp_size,
                "data-parallel rank ", config_.dp_rank, " is not in [0, ", config_.dp_size, ")");
  MEGADLM_CHECK(config_.consumed_samples >= 0, "consumed_samples ", config_.consumed_samples, " is negative");
  if (config_.prefetch) thread_ = std::thread([this] { prefetch_loop(); });
}

BatchLoader::~BatchLoader() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
}

int64_t BatchLoader::consumed_samples() const {
  return config_.consumed_samples + taken_ * config_.micro_batch_size * config_.dp_size;
}

void BatchLoader::build(int64_t k, SampleBatch& out) const {
  const int64_t B = config_.micro_batch_size, T = dataset_->seq_length();
  out.B = B;
  out.T = T;
  // consumed_samples when this micro-batch's global batch began, then this rank's B of it.
  const int64_t base = config_.consumed_samples + k * B * config_.dp_size + config_.dp_rank * B;
  out.first_sample = static_cast<uint64_t>(base);
  out.tokens.resize(static_cast<size_t>(B * (T + 1)));
  // --sft data: the loss mask rides along; any other data leaves it empty.
  const bool mask = dataset_->has_loss_mask();
  out.loss_mask.resize(mask ? static_cast<size_t>(B * (T + 1)) : 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t id = base + b;
    MEGADLM_CHECK(id < dataset_->size(), "the data loader needs sample ", id, " but the dataset has only ",
                  dataset_->size(), " (train for fewer iterations or build the dataset with more samples)");
    dataset_->sample(id, out.tokens.data() + b * (T + 1));
    if (mask) dataset_->sample_loss_mask(id, out.loss_mask.data() + b * (T + 1));
  }
}

void BatchLoader::prefetch_loop() {
  for (int64_t k = 0;; ++k) {
    SampleBatch b;
    try {
      build(k, b);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return stop_ || !has_ready_; });
    if (stop_) return;
    ready_ = std::move(b);
    ready_k_ = k;
    has_ready_ = true;
    cv_.notify_all();
  }
}

SampleBatch BatchLoader::next() {
  SampleBatch out;
  if (!config_.prefetch) {
    build(taken_, out);
  } else {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return has_ready_ || error_ != nullptr; });
    if (!has_ready_) std::rethrow_exception(error_);
    MEGADLM_CHECK(ready_k_ == taken_, "BatchLoader: internal error: prefetched micro-batch ", ready_k_, " but ", taken_,
                  " is due");
    out = std::move(ready_);
    has_ready_ = false;
    cv_.notify_all();
  }
  ++taken_;
  return out;
}

}  // namespace megadlm
