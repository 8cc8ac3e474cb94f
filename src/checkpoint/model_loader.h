#pragma once
// Rebuilds a model from a native checkpoint alone: its state.json records the model type, the config
// and the tokenizer, so generation and evaluation need no model flags.
#include <memory>
#include <string>

#include "checkpoint/hf_t5.h"
#include "checkpoint/native_checkpoint.h"
#include "models/language_model.h"
#include "models/t5_model.h"

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

// A build without CUDA, or no GPU visible: an Error naming --device (load_model checks it before reading
// anything).
void check_device_available(Device device);

// The model_type recorded in the checkpoint at `path` (a directory as for load_model).
std::string checkpoint_model_type(const std::string& path);

// A model_type t5 checkpoint (T5Trainer's, or convert_checkpoint --to-native's): T5Model rebuilt in one
// process from state.json's config and "t5" options (its pad, eos and decoder start ids in `info`),
// the full tensors whatever tensor-parallel layout wrote them. CPU, fp32.
struct LoadedT5Model {
  std::unique_ptr<T5Model> model;
  CheckpointState state;
  std::string dir;
  HfT5Info info;
};
LoadedT5Model load_t5_model(const std::string& path);

}  // namespace megadlm
