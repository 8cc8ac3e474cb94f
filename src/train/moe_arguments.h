#pragma once
// pretrain_difflm's Mixture-of-Experts flags (Megatron's names): declared and read here so that
// arguments.cpp only calls these two functions.
#include "core/cli_flags.h"
#include "nn/transformer_config.h"

namespace megadlm {

void declare_moe_flags(CliFlags& f);
// Reads the flags into model.moe; the dense sizes (ffn hidden, activation) must be set already.
// Throws an Error naming the flag at fault.
void read_moe_flags(const CliFlags& f, TransformerConfig& model);
// One line describing the MoE setup for the startup log ("" for a dense model).
std::string describe_moe(const TransformerConfig& model);

}  // namespace megadlm
