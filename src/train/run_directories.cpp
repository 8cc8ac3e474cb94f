#include "train/run_directories.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "train/step_guard.h"

namespace megadlm {

namespace {

std::string iteration_list(const std::vector<int64_t>& its) {
  std::string out;
  for (size_t i = 0; i < its.size() && i < 5; ++i) out += (i ? ", " : "") + std::to_string(its[i]);
  if (its.size() > 5) out += ", ... " + std::to_string(its.back());
  return out;
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  const bool same = std::filesystem::equivalent(a, b, ec);
  return !ec && same;
}

}  // namespace

std::string config_mismatch(const nlohmann::json& want, const nlohmann::json& got,
                            const std::vector<std::string>& ignored) {
  std::string out;
  for (auto it = want.begin(); it != want.end(); ++it) {
    const bool compared =
        it.key() != "init_method_std" && std::find(ignored.begin(), ignored.end(), it.key()) == ignored.end();
    if (compared && (!got.contains(it.key()) || got[it.key()] != *it))
      out += " " + it.key() + " (flags: " + it->dump() + ", checkpoint: " +
             (got.contains(it.key()) ? got[it.key()].dump() : "absent") + ")";
  }
  return out;
}

void prepare_save_dir(const std::string& save) {
  std::error_code ec;
  std::filesystem::create_directories(save, ec);
  MEGADLM_CHECK(!ec, "--save ", save, ": cannot create the directory (", ec.message(), ")");
  const std::string why = why_cannot_create(save + "/.write_probe");
  MEGADLM_CHECK(why.empty(), "--save ", save, ": cannot create files there (", why, ")");
}

void check_load_path(const std::string& load) {
  struct stat st {};
  if (::stat(load.c_str(), &st) == 0) {
    MEGADLM_CHECK(S_ISDIR(st.st_mode), "--load ", load, ": not a directory");
    return;
  }
  const int e = errno;
  if (e == ENOENT) return;
  fail("--load ", load, ": ", e == ENOTDIR ? "a component of the path is not a directory" : std::strerror(e));
}

void check_save_dir(const std::string& save, const std::string& resumed_from, int64_t iteration, bool finetune) {
  const std::vector<int64_t> its = checkpoint_iterations_in(save);
  if (its.empty()) return;
  MEGADLM_CHECK(saves_where_it_resumed(save, resumed_from), "--save ", save, " already holds checkpoints (iterations ", iteration_list(its),
                ") that this run does not resume from",
                finetune ? " (--finetune starts a new run at iteration 0)" : "",
                "; it would replace them: give --load ", save,
                finetune ? " without --finetune" : "", " to resume them, or an empty --save directory");
  // A resume from an older checkpoint of the same directory (the pointer set back by hand, or a crash
  // between a directory's rename and the pointer's update) goes over the newer iterations again.
  for (int64_t it : its)
    if (it > iteration)
      log_info("warning: --save ", save, " holds iteration ", it, ", newer than the one resumed (", iteration,
               "); this run replaces it if it saves that iteration");
}

bool saves_where_it_resumed(const std::string& save, const std::string& resumed_from) {
  if (resumed_from.empty()) return false;
  std::filesystem::path loaded(resumed_from);
  if (!loaded.has_filename()) loaded = loaded.parent_path();  // --load given with a trailing '/'
  const std::string parent = loaded.parent_path().string();
  return same_directory(parent.empty() ? "." : parent, save);
}

std::string checkpoint_to_load(const std::string& load) {
  const std::string dir = resolve_checkpoint_dir(load);
  if (dir.empty()) log_info("--load ", load, ": no checkpoint found there, starting from scratch");
  return dir;
}

void log_loaded(const std::string& dir, const CheckpointState& st, bool finetune) {
  log_info("loaded checkpoint ", dir, " (iteration ", st.iteration, ", consumed samples ", st.consumed_samples,
           finetune ? "; --finetune: starting at iteration 0" : "", ")");
}

void check_finite_before_save(const ParamStore& params, const AdamW* optimizer, int64_t iteration,
                              const std::string& save) {
  const std::string bad = first_non_finite_parameter(params, optimizer);
  MEGADLM_CHECK(bad.empty(), "not saving the checkpoint of iteration ", iteration, " to ", save, ": parameter '", bad,
                "' holds a NaN or Inf; the last checkpoint written is the last good one");
}

}  // namespace megadlm
