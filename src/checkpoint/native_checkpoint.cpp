#include "checkpoint/native_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace megadlm {

namespace {

std::string iter_name(int64_t it) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(it));
  return buf;
}

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

const char* kPointer = "latest_checkpointed_iteration.txt";

// The iteration a directory named iter_<digits> holds; nullopt for any other name (iter_N.tmp,
// iter_N.old, a renamed copy).
std::optional<int64_t> iteration_of_name(const std::string& name) {
  if (name.size() <= 5 || name.rfind("iter_", 0) != 0 || name.size() > 5 + 18) return std::nullopt;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return std::stoll(name.substr(5));
}

// The last component of a directory path, a trailing '/' ignored.
std::string base_name(const std::string& dir) {
  fs::path p(dir);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

uint64_t file_checksum(const std::string& path) {
  std::ifstream in = open_input_file(path);
  uint64_t h = kFnv1a64Offset;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = fnv1a64_update(h, buf.data(), static_cast<size_t>(in.gcount()));
  }
  return h;
}

std::string save_checkpoint(const std::string& save_dir, const LanguageModel& model, const AdamW* optimizer,
                            const CheckpointState& state) {
  return save_checkpoint(save_dir, model.params(), optimizer, state);
}

std::string save_checkpoint(const std::string& save_dir, const ParamStore& ps, const AdamW* optimizer,
                            const CheckpointState& state) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  MEGADLM_CHECK(!ec, save_dir, ": cannot create the checkpoint directory (", ec.message(), ")");
  const std::string final_dir = save_dir + "/" + iter_name(state.iteration);
  const std::string tmp_dir = final_dir + ".tmp";
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  MEGADLM_CHECK(!ec, tmp_dir, ": cannot create (", ec.message(), ")");

  try {
    std::vector<SafetensorsEntry> weights;
    for (int i = 0; i < ps.count(); ++i) weights.push_back({ps.info(i).name, ps.value(i)});
    write_safetensors(tmp_dir + "/model.safetensors", weights, {{"format", "megadlm"}});
    nlohmann::json files;
    files["model.safetensors"] = hex64(file_checksum(tmp_dir + "/model.safetensors"));
    if (optimizer) {
      auto* opt = const_cast<AdamW*>(optimizer);
      std::vector<SafetensorsEntry> st;
      for (int i = 0; i < ps.count(); ++i) {
        const ParamInfo& p = ps.info(i);
        st.push_back({"exp_avg." + p.name, Tensor::borrow(opt->exp_avg().data<float>() + p.offset, p.shape, DType::F32)});
        st.push_back({"exp_avg_sq." + p.name,
                      Tensor::borrow(opt->exp_avg_sq().data<float>() + p.offset, p.shape, DType::F32)});
      }
      write_safetensors(tmp_dir + "/optimizer.safetensors", st,
                        {{"steps_taken", std::to_string(optimizer->steps_taken())}});
      files["optimizer.safetensors"] = hex64(file_checksum(tmp_dir + "/optimizer.safetensors"));
    }
    nlohmann::json j;
    j["format_version"] = 1;
    j["iteration"] = state.iteration;
    j["consumed_samples"] = state.consumed_samples;
    j["optimizer_steps"] = optimizer ? optimizer->steps_taken() : 0;
    j["checksums_fnv1a64"] = files;
    j["meta"] = state.meta.is_null() ? nlohmann::json::object() : state.meta;
    write_file_atomic(tmp_dir + "/state.json", j.dump(2) + "\n");
    fsync_dir(tmp_dir);
    // Replace an older checkpoint of the same iteration only now that the new one is complete.
    if (fs::exists(final_dir)) {
      const std::string old = final_dir + ".old";
      fs::remove_all(old, ec);
      fs::rename(final_dir, old, ec);
      MEGADLM_CHECK(!ec, final_dir, ": cannot move the previous checkpoint aside (", ec.message(), ")");
      fs::rename(tmp_dir, final_dir, ec);
      MEGADLM_CHECK(!ec, final_dir, ": rename failed (", ec.message(), ")");
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp_dir, final_dir, ec);
      MEGADLM_CHECK(!ec, final_dir, ": rename failed (", ec.message(), ")");
    }
    fsync_dir(save_dir);
    write_file_atomic(save_dir + "/" + kPointer, std::to_string(state.iteration) + "\n");
    fsync_dir(save_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  return final_dir;
}

// Parses and validates <dir>/state.json: every field used later has the right type, so that no
// JSON type error can escape as anything but an Error naming the file.
static nlohmann::json read_state_json(const std::string& dir) {
  const std::string path = dir + "/state.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), ")");
  }
  MEGADLM_CHECK(j.is_object() && j.contains("iteration") && j.contains("consumed_samples") && j.contains("meta"), path,
                ": lacks iteration, consumed_samples or meta");
  MEGADLM_CHECK(j["iteration"].is_number_integer() && j["iteration"].get<int64_t>() >= 0, path,
                ": iteration is not a non-negative integer");
  MEGADLM_CHECK(j["consumed_samples"].is_number_unsigned() || (j["consumed_samples"].is_number_integer() &&
                                                            j["consumed_samples"].get<int64_t>() >= 0),
                path, ": consumed_samples is not a non-negative integer");
  MEGADLM_CHECK(j["meta"].is_object(), path, ": meta is not an object");
  MEGADLM_CHECK(!j.contains("optimizer_steps") || j["optimizer_steps"].is_number_integer(), path,
                ": optimizer_steps is not an integer");
  const nlohmann::json sums = j.value("checksums_fnv1a64", nlohmann::json::object());
  MEGADLM_CHECK(sums.is_object(), path, ": checksums_fnv1a64 is not an object");
  for (auto it = sums.begin(); it != sums.end(); ++it)
    MEGADLM_CHECK(it->is_string(), path, ": the checksum of ", it.key(), " is not a string");
  // The directory's name and the checksummed files decide the iteration: state.json is not covered
  // by a checksum, and trusting an edited or stale iteration would re-run iterations on resume and
  // replace the checkpoints they produced.
  const std::optional<int64_t> named = iteration_of_name(base_name(dir));
  MEGADLM_CHECK(!named || *named == j["iteration"].get<int64_t>(), path, ": iteration ", j["iteration"].get<int64_t>(),
                " does not match the directory's iteration ", *named, " (", base_name(dir), ")");
  return j;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const nlohmann::json j = read_state_json(dir);
  CheckpointState s;
  s.iteration = j["iteration"].get<int64_t>();
  s.consumed_samples = j["consumed_samples"].get<uint64_t>();
  s.meta = j["meta"];
  return s;
}

static void verify_checksum(const std::string& dir, const nlohmann::json& sums, const std::string& file) {
  MEGADLM_CHECK(sums.contains(file), dir, "/state.json: no checksum recorded for ", file);
  const std::string path = dir + "/" + file;
  MEGADLM_CHECK(fs::exists(path), path, ": missing");
  const std::string got = hex64(file_checksum(path));
  MEGADLM_CHECK(got == sums[file].get<std::string>(), path, ": checksum mismatch (file is corrupt or truncated: expected ",
                sums[file].get<std::string>(), ", got ", got, ")");
}

void load_checkpoint_tensors(const std::string& dir, LanguageModel& model, AdamW* optimizer) {
  load_checkpoint_tensors(dir, model.params(), optimizer);
}

void load_checkpoint_tensors(const std::string& dir, ParamStore& ps, AdamW* optimizer) {
  const nlohmann::json j = read_state_json(dir);
  const nlohmann::json sums = j.value("checksums_fnv1a64", nlohmann::json::object());
  verify_checksum(dir, sums, "model.safetensors");
  {
    SafetensorsFile f(dir + "/model.safetensors");
    for (int i = 0; i < ps.count(); ++i) {
      const ParamInfo& p = ps.info(i);
      MEGADLM_CHECK(f.has(p.name), f.path(), ": missing parameter '", p.name, "' (does the checkpoint match the model flags?)");
      Tensor src = f.get(p.name);
      MEGADLM_CHECK(src.shape() == p.shape, f.path(), ": parameter '", p.name, "' has shape ", src.shape().str(),
                    " but the model expects ", p.shape.str());
      Tensor dst = ps.value(i);
      f.read_into(p.name, dst);
    }
  }
  if (optimizer) {
    verify_checksum(dir, sums, "optimizer.safetensors");
    SafetensorsFile f(dir + "/optimizer.safetensors");
    for (int i = 0; i < ps.count(); ++i) {
      const ParamInfo& p = ps.info(i);
      Tensor m = Tensor::borrow(optimizer->exp_avg().data<float>() + p.offset, p.shape, DType::F32);
      Tensor v = Tensor::borrow(optimizer->exp_avg_sq().data<float>() + p.offset, p.shape, DType::F32);
      MEGADLM_CHECK(f.has("exp_avg." + p.name) && f.has("exp_avg_sq." + p.name), f.path(),
                    ": missing optimizer state for '", p.name, "'");
      f.read_into("exp_avg." + p.name, m);
      f.read_into("exp_avg_sq." + p.name, v);
    }
    optimizer->set_steps_taken(j.value("optimizer_steps", int64_t{0}));
  }
}

std::string checkpoint_problem(const std::string& dir) {
  try {
    const nlohmann::json j = read_state_json(dir);
    const nlohmann::json sums = j.value("checksums_fnv1a64", nlohmann::json::object());
    verify_checksum(dir, sums, "model.safetensors");
    for (auto it = sums.begin(); it != sums.end(); ++it) verify_checksum(dir, sums, it.key());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<int64_t> checkpoint_iterations_in(const std::string& save_dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> n = iteration_of_name(it->path().filename().string());
    if (n && it->is_directory(ec)) out.push_back(*n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The iteration the pointer file names (an Error naming the file when it holds anything else).
int64_t read_pointer(const std::string& ptr) {
  const std::string text = read_file(ptr);
  long long it = -1;
  try {
    size_t used = 0;
    it = std::stoll(text, &used);
  } catch (...) {
    fail(ptr, ": does not hold an iteration number");
  }
  MEGADLM_CHECK(it >= 0, ptr, ": negative iteration ", it);
  return it;
}

// Without a pointer file the save directory's contents decide: the newest iter_N whose state.json is
// valid and whose files match their checksums. Anything newer that is skipped (an unfinished
// iter_N.tmp, a directory that fails its checks) is named in a warning with the reason. A directory
// that holds checkpoint directories none of which is complete is an Error: starting from scratch
// there would overwrite them.
std::string newest_complete_checkpoint(const std::string& path) {
  struct Candidate {
    int64_t iteration;
    std::string name;
    bool temporary;  // iter_N.tmp / iter_N.old: never loaded
  };
  std::vector<Candidate> found;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("iter_", 0) != 0 || !it->is_directory(ec)) continue;
    const std::string stem = name.substr(0, name.find('.'));
    const std::optional<int64_t> n = iteration_of_name(stem);
    if (n) found.push_back({*n, name, stem != name});
  }
  // Only leftovers of crashed saves: nothing that a new run could replace.
  if (std::all_of(found.begin(), found.end(), [](const Candidate& c) { return c.temporary; })) return "";
  std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.iteration != b.iteration ? a.iteration > b.iteration : a.name > b.name;
  });
  std::string skipped;
  for (const Candidate& c : found) {
    const std::string dir = path + "/" + c.name;
    const std::string why = c.temporary ? "an unfinished save, never loaded" : checkpoint_problem(dir);
    if (why.empty()) {
      log_info("warning: ", path, " has no ", kPointer, "; resuming from the newest complete checkpoint ", dir,
               skipped.empty() ? "" : "; skipped:" + skipped);
      return dir;
    }
    skipped += " " + c.name + " (" + why + ")";
  }
  fail(path, ": no ", kPointer, " and none of its checkpoint directories is complete:", skipped,
       "; refusing to start from scratch over them (repair or move them, or give another directory)");
}

}  // namespace

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/state.json")) return path;
  const std::string ptr = path + "/" + kPointer;
  if (!fs::exists(ptr)) return newest_complete_checkpoint(path);
  const int64_t it = read_pointer(ptr);
  const std::string dir = path + "/" + iter_name(it);
  MEGADLM_CHECK(fs::exists(dir + "/state.json"), ptr, " points to iteration ", it, " but ", dir,
                " is missing or incomplete");
  return dir;
}

}  // namespace megadlm
