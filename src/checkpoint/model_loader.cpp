#include "checkpoint/model_loader.h"

#include "checkpoint/family_info.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "models/config_json.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "models/llava_model.h"

namespace megadlm {

namespace {

std::string checkpoint_dir_of(const std::string& path) {
  const std::string dir = resolve_checkpoint_dir(path);
  MEGADLM_CHECK(!dir.empty(), path, ": no checkpoint there (no state.json and no latest_checkpointed_iteration.txt)");
  return dir;
}

}  // namespace

void check_device_available(Device device) {
  if (device == Device::CPU) return;
  try {
    backend_for(device);
  } catch (const Error& e) {
    fail("--device ", device_name(device), ": ", e.what());
  }
}

std::string checkpoint_model_type(const std::string& path) {
  const std::string dir = checkpoint_dir_of(path);
  const nlohmann::json& meta = read_checkpoint_state(dir).meta;
  MEGADLM_CHECK(meta.contains("model_type") && meta["model_type"].is_string(), dir, "/state.json: lacks the model type");
  return meta["model_type"].get<std::string>();
}

LoadedT5Model load_t5_model(const std::string& path) {
  LoadedT5Model m;
  m.dir = checkpoint_dir_of(path);
  m.state = read_checkpoint_state(m.dir);
  m.info = t5_info_of(m.state.meta, m.dir + "/state.json");
  m.model = std::make_unique<T5Model>(m.info.config, m.info.options, ParallelContext::single());
  load_checkpoint_tensors(m.dir, m.model->params(), nullptr);
  return m;
}

LoadedModel load_model(const std::string& path, Device device) {
  LoadedModel m;
  check_device_available(device);
  m.dir = checkpoint_dir_of(path);
  m.state = read_checkpoint_state(m.dir);
  const nlohmann::json& meta = m.state.meta;
  const std::string where = m.dir + "/state.json";
  MEGADLM_CHECK(meta.contains("config") && meta.contains("model_type"), where, ": lacks the model config or type");
  const TransformerConfig cfg = config_from_json(meta["config"], where);
  MEGADLM_CHECK(meta["model_type"] != "clip_vision", where, ": a clip_vision model (CLIP's vision tower): generate ",
                "and evaluate run gpt, difflm and llava models; convert_checkpoint --to-hf exports it");
  // LLaVA: the language backbone's type, and the tower and projector from the "llava" options.
  const bool llava = meta["model_type"] == "llava";
  MEGADLM_CHECK(!llava || device == Device::CPU, where, ": a llava model runs on the CPU (--device cpu)");
  const ModelType type = model_type_from_name(
      llava ? meta.value("language_model_type", std::string("?")) : meta["model_type"].get<std::string>());
  MEGADLM_CHECK(type != ModelType::BERT, where, ": a bert model: generate runs gpt and difflm models (evaluate ",
                "scores a bert checkpoint on --data-path: docs/bert.md); convert_checkpoint --to-hf exports it");
  MEGADLM_CHECK(type != ModelType::T5, where, ": a t5 model is an encoder-decoder: load_t5_model builds it");
  m.diffusion = type == ModelType::DiffLM;
  m.mask_token = meta.value("mask_token", -1);
  m.eod = meta.value("eod", -1);
  const ModelSpec spec = model_spec(type, cfg);
  m.model = llava ? make_llava_model(cfg, spec, llava_from_json(meta.value("llava", nlohmann::json()), where),
                                     ParallelContext::single())
                  : std::make_unique<LanguageModel>(cfg, spec, ParallelContext::single());
  load_checkpoint_tensors(m.dir, *m.model, nullptr);
  if (device != Device::CPU) {
    auto on_device = std::make_unique<LanguageModel>(cfg, spec, ParallelContext::single(), true, true, device);
    on_device->params().copy_values_from_host(m.model->params().values());
    m.model = std::move(on_device);
  }
  return m;
}

}  // namespace megadlm
