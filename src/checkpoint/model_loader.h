#pragma once
// Rebuilds a model from a native checkpoint alone: its state.json records the model type, the config
// and the tokenizer, so generation and evaluation need no model flags.
#include <memory>
#include <string>

#include "checkpoint/native_checkpoint.h"
#include "models/language_model.h"

namespace megadlm {

struct LoadedModel {
  std::unique_ptr<LanguageModel> model;
  CheckpointState state;
  std::string dir;
  bool diffusion = false;
  int32_t mask_token = -1;
  int32_t eod = -1;
};

// `path` is a checkpoint directory or a --save directory (its latest checkpoint is used). On a device
// the tensors are read into a host model of the same layout and uploaded (one copy of the flat values).
LoadedModel load_model(const std::string& path, Device device = Device::CPU);

}  // namespace megadlm
