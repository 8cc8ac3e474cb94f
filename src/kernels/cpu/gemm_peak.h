#pragma once
// The CPU's matrix-product rate, for the trainer's MFU and --bf16's choice of products: the best of a
// few oneDNN products of fixed shapes, fp32, or bf16 inputs with fp32 accumulation (gemm_bf16, the
// products a run with bf16 products makes). Measured once per precision per process.
#include <string>

namespace megadlm::cpu {

double gemm_peak_flops(bool bf16);
// The shapes and repetitions, for the log.
std::string gemm_peak_description();

}  // namespace megadlm::cpu
