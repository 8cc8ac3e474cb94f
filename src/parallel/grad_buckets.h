#pragma once
// Data-parallel gradient reduction in buckets (Megatron's DDP): the flat gradient buffer is cut into
// buckets of about --ddp-bucket-size elements, in the reverse of registration order (the order in
// which the backward finishes them). With overlap on, a bucket's all-reduce starts as soon as the
// last micro-batch's backward has made its gradients final (LanguageModel's grads-ready hook) and
// runs while the backward of earlier layers continues; finish() waits for all of them before the
// optimizer. Without overlap, finish() reduces every bucket then.
//
// Dense parameters are summed over the data-parallel group, expert parameters over the
// expert-data-parallel group, both then divided by dp; a bucket holds one kind only. Groups of one
// cost nothing.
#include <cstdint>
#include <vector>

#include "core/parameters.h"
#include "parallel/communicator.h"
#include "parallel/parallel_context.h"

namespace megadlm {

class GradBuckets {
 public:
  GradBuckets(ParamStore& params, const ParallelContext& ctx, int64_t bucket_elems, bool overlap);

  // Before the backward of the step's last micro-batch: from now on grads_ready() launches buckets.
  void arm();
  // Parameters with id >= first_final_param have their final gradients (called during the backward,
  // with decreasing ids; 0 at the end). Launches the buckets that became complete, when armed.
  void grads_ready(int first_final_param);
  // Launches what is left, waits for everything, divides by the group sizes. Gradients are then the
  // data-parallel mean. Disarms.
  void finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Parameter ids [first, last] of bucket i (first <= last), for tests.
  int bucket_first_param(int i) const { return buckets_.at(i).first_param; }
  int bucket_last_param(int i) const { return buckets_.at(i).last_param; }
  // Buckets launched while armed before finish() in the last step (overlap measure, for tests).
  int launched_early() const { return launched_early_; }

 private:
  struct Bucket {
    int first_param = 0, last_param = 0;  // parameter ids, inclusive
    int64_t begin = 0, end = 0;           // flat element range
    bool expert = false;
    CommRequest req;
    bool launched = false;
  };
  void launch(Bucket& b);
  const ParallelGroup& group(const Bucket& b) const { return b.expert ? ctx_.edp : ctx_.dp; }

  ParamStore& params_;
  ParallelContext ctx_;
  bool overlap_;
  std::vector<Bucket> buckets_;  // in launch order: highest parameter ids first
  size_t next_ = 0;              // first bucket not launched
  bool armed_ = false;
  int launched_early_ = 0;
};

}  // namespace megadlm
