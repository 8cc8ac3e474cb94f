#include "checkpoint/native_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"

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
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  MEGADLM_CHECK(!ec, save_dir, ": cannot create the checkpoint directory (", ec.message(), ")");
  const std::string final_dir = save_dir + "/" + iter_name(state.iteration);
  const std::string tmp_dir = final_dir + ".tmp";
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  MEGADLM_CHECK(!ec, tmp_dir, ": cannot create (", ec.message(), ")");

  try {
    const ParamStore& ps = model.params();
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

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/state.json")) return path;
  const std::string ptr = path + "/" + kPointer;
  if (!fs::exists(ptr)) return "";
  std::string text = read_file(ptr);
  long long it = -1;
  try {
    size_t used = 0;
    it = std::stoll(text, &used);
  } catch (...) {
    fail(ptr, ": does not hold an iteration number");
  }
  MEGADLM_CHECK(it >= 0, ptr, ": negative iteration ", it);
  const std::string dir = path + "/" + iter_name(it);
  MEGADLM_CHECK(fs::exists(dir + "/state.json"), ptr, " points to iteration ", it, " but ", dir,
                " is missing or incomplete");
  return dir;
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
  const nlohmann::json j = read_state_json(dir);
  const nlohmann::json sums = j.value("checksums_fnv1a64", nlohmann::json::object());
  verify_checksum(dir, sums, "model.safetensors");
  ParamStore& ps = model.params();
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

}  // namespace megadlm
