#pragma once
// The folder-to-folder include rules of src/, checked from the sources themselves.
//
// The layers are the folders listed in the "Layers" block of docs/ARCHITECTURE.md, top to bottom: a
// folder may include its own headers and those of any folder listed below it, never one above it.
// Two more rules:
//   - kernels/cpu/ and kernels/cuda/ are the backends' implementations: only files under kernels/
//     include them; every other folder reaches the kernels through kernels/backend.h (Backend) and the
//     device-neutral kernels/types.h;
//   - the documented exceptions (docs/ARCHITECTURE.md, "Exceptions"): a file named there may include
//     the folder named with it.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace megadlm::layering {

struct Include {
  std::string file;     // path under src/, e.g. "nn/mlp.cpp"
  int line = 0;         // 1-based
  std::string target;   // as written, e.g. "kernels/backend.h"
};

// A file's folder for the rules: its first path component, except under kernels/, where the backends'
// folders count on their own ("kernels/cpu", "kernels/cuda") and every other file is "kernels".
std::string folder_of(const std::string& path);

// Every quoted #include of every .h, .cpp, .cu, .cuh and .inc file under `src_dir` (relative targets,
// i.e. those without a folder, are the file's own folder and are left out).
std::vector<Include> scan_includes(const std::filesystem::path& src_dir);

// The layer order from the fenced "Layers" block of `architecture_md`: the folder names (lines starting
// with `name/`) from top to bottom. Throws std::runtime_error when the block is missing or empty.
std::vector<std::string> documented_layers(const std::filesystem::path& architecture_md);

// The exceptions listed in `architecture_md`: lines "- `src/<file>` includes `<folder>/`" (indented or not).
std::map<std::string, std::string> documented_exceptions(const std::filesystem::path& architecture_md);

// The includes that break the rules, one message each ("nn/mlp.cpp:4 includes kernels/cpu/elementwise.h:
// nn may not include kernels/cpu"), given the layer order (top first) and the exceptions.
std::vector<std::string> violations(const std::vector<Include>& includes, const std::vector<std::string>& layers,
                                    const std::map<std::string, std::string>& exceptions);

// The matrix of include counts, rows = including folder, columns = included folder, as text.
std::string include_matrix(const std::vector<Include>& includes, const std::vector<std::string>& layers);

}  // namespace megadlm::layering
