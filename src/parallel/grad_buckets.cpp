#include "parallel/grad_buckets.h"

#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

GradBuckets::GradBuckets(ParamStore& params, const ParallelContext& ctx, int64_t bucket_elems, bool overlap)
    : params_(params), ctx_(ctx), overlap_(overlap) {
  MEGADLM_CHECK(bucket_elems >= 1, "--ddp-bucket-size must be positive, got ", bucket_elems);
  MEGADLM_CHECK(params.finalized(), "gradient buckets built before the model was finalised");
  // Walk the parameters backwards (backward order); close a bucket when it is full or the kind
  // (dense / expert: different groups) changes. Parameters are contiguous in the flat buffer, so a
  // bucket is one range, padding included (padding gradients are zero).
  const int n = params.count();
  int i = n - 1;
  while (i >= 0) {
    Bucket b;
    b.last_param = i;
    b.expert = params.info(i).expert;
    const ParamInfo& last = params.info(i);
    b.end = last.offset + last.shape.numel();
    int64_t elems = 0;
    while (i >= 0 && params.info(i).expert == b.expert && (elems == 0 || elems < bucket_elems)) {
      elems += params.info(i).shape.numel();
      --i;
    }
    b.first_param = i + 1;
    b.begin = params.info(b.first_param).offset;
    buckets_.push_back(b);
  }
}

void GradBuckets::arm() {
  armed_ = true;
  next_ = 0;
  launched_early_ = 0;
  for (Bucket& b : buckets_) b.launched = false;
}

void GradBuckets::launch(Bucket& b) {
  const ParallelGroup& g = group(b);
  // The gradients' device picks the communicator: MPI for host buffers, NCCL for a GPU's.
  if (g.size > 1)
    b.req = g.communicator(params_.device()).all_reduce_sum_async(params_.grads() + b.begin, b.end - b.begin);
  b.launched = true;
}

void GradBuckets::grads_ready(int first_final_param) {
  if (!armed_ || !overlap_) return;
  while (next_ < buckets_.size() && buckets_[next_].first_param >= first_final_param) {
    launch(buckets_[next_++]);
    ++launched_early_;
  }
}

void GradBuckets::finish() {
  for (; next_ < buckets_.size(); ++next_) launch(buckets_[next_]);
  // Every rank's loss is the mean over its own micro-batches, so the global mean is the sum over dp
  // divided by dp, for experts too: an expert's gradient already sums the tokens that all ep ranks
  // sent it, and the edp sum adds the other ep groups (ep x edp = dp; Megatron scales both by 1/dp).
  const float scale = 1.0f / static_cast<float>(ctx_.dp.size);
  const Backend& be = backend_for(params_.device());
  for (Bucket& b : buckets_) {
    const ParallelGroup& g = group(b);
    if (g.size > 1) g.communicator(params_.device()).wait(b.req);
    if (ctx_.dp.size > 1) be.scale_inplace(params_.grads() + b.begin, scale, b.end - b.begin);
  }
  armed_ = false;
}

}  // namespace megadlm
