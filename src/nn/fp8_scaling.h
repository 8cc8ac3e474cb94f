#pragma once
// FP8 delayed scaling (Transformer Engine's recipe): a tensor that feeds a matrix product is quantised
// to E4M3 (or, for gradients under the hybrid format, E5M2) with a per-tensor scale computed from the
// history of its absolute maxima, then dequantised and multiplied in fp32 (on the CPU, or on a device
// through its backend), so the recipe and its numerics run and are tested everywhere. Where the device
// has fp8 products (Backend::fp8_products()), the Linear layers multiply the codes themselves with the
// same scales (nn/precision.h, fp8_products).
//
// Delayed scaling: the scale used in step i comes from the amax history of steps before i:
//   amax  = max(history)            (--fp8-amax-compute-algo max)
//         | history[most recent]    (--fp8-amax-compute-algo most_recent)
//   scale = (fp8_max / amax) / 2^margin
// and the amax of every tensor quantised during step i is recorded (max over the step's uses) into
// the history slot of step i. A scale stays as it was while its amax is 0 or not finite.
#include <cstdint>
#include <string>
#include <vector>

namespace megadlm {

class Backend;

enum class Fp8Format : uint8_t { E4M3, Hybrid };      // hybrid: E4M3 forward, E5M2 gradients
enum class Fp8AmaxAlgo : uint8_t { Max, MostRecent };

struct Fp8Recipe {
  Fp8Format format = Fp8Format::Hybrid;
  int64_t amax_history_len = 1;     // --fp8-amax-history-len (Megatron: 1)
  Fp8AmaxAlgo amax_algo = Fp8AmaxAlgo::MostRecent;
  int margin = 0;                   // --fp8-margin
};

Fp8Format fp8_format_from_name(const std::string& name);     // "e4m3" | "hybrid"
Fp8AmaxAlgo fp8_amax_algo_from_name(const std::string& name);  // "max" | "most_recent"
const char* fp8_format_name(Fp8Format f);

// Which fp8 type a tensor is quantised to.
enum class Fp8Kind : uint8_t { E4M3, E5M2 };
float fp8_max(Fp8Kind k);  // 448 or 57344

// The scaling state of one tensor (an activation, a weight or a gradient of one Linear layer).
class Fp8TensorScaling {
 public:
  Fp8TensorScaling() = default;
  Fp8TensorScaling(Fp8Kind kind, const Fp8Recipe& recipe);

  float scale() const { return scale_; }
  Fp8Kind kind() const { return kind_; }
  // Records the amax of a tensor quantised in the current step (max with earlier uses this step).
  void record(float amax);
  // Closes the step: computes the next step's scale from the history (including this step's amax),
  // then moves on to a fresh history slot (the oldest one is forgotten once the history is full).
  void update();
  // The amax history, oldest first, ending with the current step's slot. For tests and logs.
  std::vector<float> history() const;

 private:
  Fp8Kind kind_ = Fp8Kind::E4M3;
  Fp8Recipe recipe_;
  float scale_ = 1.0f;
  std::vector<float> ring_;  // [amax_history_len]
  int64_t head_ = 0;         // the current step's slot
  int64_t filled_ = 1;       // slots that hold a step (<= history length)
};

// x [n] := dequantise(quantise(x * scale)) / scale in the given format (saturating), after recording
// amax(x) in s. Returns the scale used. x is on the backend's device (the CPU's by default); the amax
// comes back to the host, where the scaling state lives.
float fp8_quantize_dequantize(const Backend& be, float* x, int64_t n, Fp8TensorScaling& s);
float fp8_quantize_dequantize(float* x, int64_t n, Fp8TensorScaling& s);

}  // namespace megadlm
