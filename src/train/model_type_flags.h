#pragma once
// Flags that belong to some model types only: given with another --model-type, each is an Error that
// names it and the types it is for.
#include <string>

#include "core/cli_flags.h"
#include "core/error.h"

namespace megadlm {

// An Error for the first of `flags` given on the command line when !applies: "--FLAG is for FOR".
template <typename Flags>
void refuse_flags_for_other_models(const CliFlags& f, bool applies, const Flags& flags, const std::string& for_what) {
  if (applies) return;
  for (const char* flag : flags) MEGADLM_CHECK(!f.given(flag), "--", flag, " is for ", for_what);
}

}  // namespace megadlm
