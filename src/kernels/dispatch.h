#pragma once
// The dispatch point between backends. Modules in nn/ call kernels through `backend_for(device)`
// (kernels/backend.h); the CPU kernels under kernels/cpu/ are always built, the CUDA kernels under
// kernels/cuda/ only with -DMEGADLM_CUDA=ON (and run only where a GPU exists).
#include "core/tensor.h"
#include "kernels/backend.h"

namespace megadlm {

bool cuda_compiled();   // built with -DMEGADLM_CUDA=ON
bool cuda_available();  // compiled and a device is visible
int cuda_device_count();  // GPUs visible (0 without CUDA)

// Before anything touches the device: the process of node-local rank `local_rank` takes its GPU
// (gpu_for_local_rank) and returns that index (0 when the device is the CPU, emulated, or has no GPU
// visible: backend_for then names the problem).
int select_device(Device device, int local_rank);

// The GPU of node-local rank `local_rank` among `visible` GPUs: GPU local_rank, as torchrun's LOCAL_RANK
// convention has it; with one GPU visible, that one (a launcher that binds one GPU per task, e.g.
// srun --gpus-per-task=1, shows each rank only its own). A local rank past the visible GPUs would share
// a GPU with another rank of the node: an Error naming both numbers.
int gpu_for_local_rank(int local_rank, int visible);

// Throws Error naming the op when the tensor's device has no backend in this build.
void require_backend(Device device, const char* op);

// Tests: serve `device` with `backend` (null restores the built-in choice). With an emulating backend
// (host memory that checks every pointer it is given) the device plumbing of the modules runs on a
// machine without the device. The backend must outlive its use.
void set_backend_for_testing(Device device, const Backend* backend);

}  // namespace megadlm
