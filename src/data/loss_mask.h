#pragma once
// Supervised fine-tuning data: beside the token dataset <prefix> lies its loss mask, an MMIDIDX dataset
// at <prefix>.loss_mask (files <prefix>.loss_mask.bin / .idx) with the same sequence and document
// lengths, dtype uint8, one value per token: 1 for a response token (the assistant's contents, their
// end-of-turn markers and the appended end-of-document token), 0 for the rest (system and user turns,
// the template's markers around them).
#include <string>

namespace megadlm {

inline std::string loss_mask_prefix(const std::string& data_prefix) { return data_prefix + ".loss_mask"; }

}  // namespace megadlm
