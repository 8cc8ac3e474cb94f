#include "architecture/layering.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

namespace megadlm::layering {

namespace fs = std::filesystem;

std::string folder_of(const std::string& path) {
  const size_t slash = path.find('/');
  if (slash == std::string::npos) return "";
  const std::string top = path.substr(0, slash);
  if (top != "kernels") return top;
  const size_t next = path.find('/', slash + 1);
  if (next == std::string::npos) return "kernels";  // kernels/backend.h, kernels/types.h, ...
  return path.substr(0, next);                       // kernels/cpu, kernels/cuda
}

// kernels/cpu and kernels/cuda rank as kernels.
static std::string layer_of(const std::string& folder) { return folder.rfind("kernels", 0) == 0 ? "kernels" : folder; }

std::vector<Include> scan_includes(const fs::path& src_dir) {
  static const std::regex include_re(R"re(^\s*#\s*include\s*"([^"]+)")re");
  static const std::set<std::string> extensions = {".h", ".cpp", ".cu", ".cuh", ".inc"};
  std::vector<Include> out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(src_dir))
    if (entry.is_regular_file() && extensions.count(entry.path().extension().string())) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::string line;
    int n = 0;
    const std::string rel = fs::relative(file, src_dir).generic_string();
    while (std::getline(in, line)) {
      ++n;
      std::smatch m;
      if (!std::regex_search(line, m, include_re)) continue;
      const std::string target = m[1].str();
      if (target.find('/') == std::string::npos) continue;  // a file of the same folder
      out.push_back(Include{rel, n, target});
    }
  }
  return out;
}

static std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::vector<std::string> documented_layers(const fs::path& architecture_md) {
  const std::vector<std::string> lines = read_lines(architecture_md);
  static const std::regex folder_re(R"(^([a-z_]+)/(\s|$))");
  std::vector<std::string> layers;
  bool in_section = false, in_block = false;
  for (const std::string& line : lines) {
    if (line.rfind("## ", 0) == 0) {
      if (in_section && !layers.empty()) break;
      in_section = line == "## Layers";
      continue;
    }
    if (!in_section) continue;
    if (line.rfind("```", 0) == 0) {
      if (in_block) break;
      in_block = true;
      continue;
    }
    std::smatch m;
    if (in_block && std::regex_search(line, m, folder_re)) layers.push_back(m[1].str());
  }
  if (layers.empty()) throw std::runtime_error(architecture_md.string() + ": no folder list in the '## Layers' block");
  return layers;
}

std::map<std::string, std::string> documented_exceptions(const fs::path& architecture_md) {
  static const std::regex exception_re(R"(^\s*- `src/([^`]+)` includes `([a-z_/]+?)/?`)");
  std::map<std::string, std::string> out;
  for (const std::string& line : read_lines(architecture_md)) {
    std::smatch m;
    if (std::regex_search(line, m, exception_re)) out[m[1].str()] = m[2].str();
  }
  return out;
}

std::vector<std::string> violations(const std::vector<Include>& includes, const std::vector<std::string>& layers,
                                    const std::map<std::string, std::string>& exceptions) {
  std::map<std::string, int> height;  // top of the list = highest
  for (size_t i = 0; i < layers.size(); ++i) height[layers[i]] = static_cast<int>(layers.size() - i);
  std::vector<std::string> out;
  for (const Include& inc : includes) {
    const std::string from = folder_of(inc.file), to = folder_of(inc.target);
    const std::string where = inc.file + ":" + std::to_string(inc.line) + " includes " + inc.target + ": ";
    auto ex = exceptions.find(inc.file);
    if (ex != exceptions.end() && ex->second == to) continue;
    if (!height.count(layer_of(from))) {
      out.push_back(where + "folder '" + from + "' is not in the documented layers");
      continue;
    }
    if (!height.count(layer_of(to))) {
      out.push_back(where + "folder '" + to + "' is not in the documented layers");
      continue;
    }
    if ((to == "kernels/cpu" || to == "kernels/cuda") && layer_of(from) != "kernels") {
      out.push_back(where + from + " may reach the kernels only through kernels/backend.h, not " + to);
      continue;
    }
    if (height[layer_of(to)] > height[layer_of(from)])
      out.push_back(where + from + " may not include " + to + ", which is above it");
  }
  return out;
}

std::string include_matrix(const std::vector<Include>& includes, const std::vector<std::string>& layers) {
  std::vector<std::string> cols;
  for (const std::string& l : layers) {
    cols.push_back(l);
    if (l == "kernels") {
      cols.push_back("kernels/cpu");
      cols.push_back("kernels/cuda");
    }
  }
  std::map<std::pair<std::string, std::string>, int> count;
  for (const Include& inc : includes) ++count[{folder_of(inc.file), folder_of(inc.target)}];
  std::ostringstream os;
  os << "including \\ included";
  for (const std::string& c : cols) os << " | " << c;
  os << "\n";
  for (const std::string& r : cols) {
    os << r;
    for (const std::string& c : cols) {
      auto it = count.find({r, c});
      os << " | " << (it == count.end() ? std::string(".") : std::to_string(it->second));
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace megadlm::layering
