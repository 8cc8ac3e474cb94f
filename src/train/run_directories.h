#pragma once
// The checks on --save and --load that every trainer makes before it trains (Trainer, BertTrainer):
// a --save directory that can take files and holds no checkpoints a new run would replace, a --load
// path that can hold a checkpoint, and the flags' model config against a checkpoint's.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"
#include "core/parameters.h"
#include "optim/adamw.h"

namespace megadlm {

// --save must be a directory this process can create files in; found out at start-up, not at the
// first save after hours of training.
void prepare_save_dir(const std::string& save);

// A --load path that cannot hold a checkpoint because it is, or lies under, something other than a
// directory. A path that does not exist is a run with nothing to resume yet (Megatron's --load).
void check_load_path(const std::string& load);

// " key (flags: X, checkpoint: Y)" for each key of `want` that `got` lacks or holds another value of;
// "" when they agree. init_method_std (not part of the architecture) and the keys in `ignored` are
// not compared.
std::string config_mismatch(const nlohmann::json& want, const nlohmann::json& got,
                            const std::vector<std::string>& ignored = {});

// Refuses a --save directory whose checkpoints this run would replace without resuming from them:
// resumed_from is the checkpoint directory the run loaded ("" for a new run or --finetune), iteration
// the one it starts from.
void check_save_dir(const std::string& save, const std::string& resumed_from, int64_t iteration, bool finetune);

// Whether --save is the directory that holds resumed_from (the checkpoint directory a resume loaded).
bool saves_where_it_resumed(const std::string& save, const std::string& resumed_from);

// The checkpoint directory --load designates; "" (logged) when it holds none yet.
std::string checkpoint_to_load(const std::string& load);
// The log line of a loaded checkpoint.
void log_loaded(const std::string& dir, const CheckpointState& st, bool finetune);

// Never replace the last good checkpoint by a poisoned state (see step_guard.h): an Error naming the
// first parameter (or moment) that holds a NaN or Inf.
void check_finite_before_save(const ParamStore& params, const AdamW* optimizer, int64_t iteration,
                              const std::string& save);

}  // namespace megadlm
