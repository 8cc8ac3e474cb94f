#include "parallel/parallel_context.h"

#include "core/error.h"

namespace megadlm {

Communicator& ParallelGroup::communicator() const {
  if (comm) return *comm;
  MDLM_CHECK(size == 1, "a parallel group of size ", size, " has no communicator");
  static SelfCommunicator self;
  return self;
}

}  // namespace megadlm
