#pragma once
// Native checkpoints, one directory per iteration (Megatron's layout and pointer file):
//   <save>/iter_0000100/model.safetensors      parameters by name (1:1 with HuggingFace names)
//   <save>/iter_0000100/optimizer.safetensors  exp_avg.<name>, exp_avg_sq.<name>
//   <save>/iter_0000100/state.json             iteration, consumed samples, seed, model config,
//                                              tokenizer, arguments, and a checksum per file
//   <save>/latest_checkpointed_iteration.txt   updated only after the directory is complete
// A directory is written under a temporary name, every file fsynced, then renamed; only then the
// pointer is replaced (itself atomically). A crash at any moment leaves the previous checkpoint
// loadable.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/language_model.h"
#include "optim/adamw.h"

namespace megadlm {

struct CheckpointState {
  int64_t iteration = 0;
  uint64_t consumed_samples = 0;
  nlohmann::json meta;  // model config, tokenizer, arguments... (anything the caller wants back)
};

// Returns the directory written.
std::string save_checkpoint(const std::string& save_dir, const LanguageModel& model, const AdamW* optimizer,
                            const CheckpointState& state);
// The same for the parameters of any model (BertModel's).
std::string save_checkpoint(const std::string& save_dir, const ParamStore& params, const AdamW* optimizer,
                            const CheckpointState& state);

// The directory that `path` designates: a checkpoint directory itself (has state.json), or a save
// directory whose latest_checkpointed_iteration.txt points to one. Without the pointer, the newest
// iter_N that passes checkpoint_problem() (a warning names each newer directory skipped and why; an
// Error when there are iter_* directories but none is complete). "" when `path` holds no checkpoint.
std::string resolve_checkpoint_dir(const std::string& path);

// Why the checkpoint directory `dir` cannot be loaded (state.json invalid or contradicting the
// directory's name, a file missing or failing its checksum); "" when it is complete.
std::string checkpoint_problem(const std::string& dir);

// The iterations of the iter_N directories in a save directory, ascending (temporaries excluded).
std::vector<int64_t> checkpoint_iterations_in(const std::string& save_dir);

// Reads state.json (checksums verified when the tensors are loaded). An Error when its iteration
// differs from the one in the directory's name (iter_NNNNNNN).
CheckpointState read_checkpoint_state(const std::string& ckpt_dir);

// Loads parameters (and the optimizer state when optimizer is not null) after verifying checksums and
// that every model parameter is present with the right shape. Throws Error naming the file and tensor.
void load_checkpoint_tensors(const std::string& ckpt_dir, LanguageModel& model, AdamW* optimizer);
void load_checkpoint_tensors(const std::string& ckpt_dir, ParamStore& params, AdamW* optimizer);

uint64_t file_checksum(const std::string& path);  // FNV-1a 64 over the bytes, hex in state.json

}  // namespace megadlm
