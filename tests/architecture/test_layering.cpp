// The include rules of docs/ARCHITECTURE.md, checked on the sources: no folder includes one listed
// above it, only kernels/ includes the backends' folders, and the exceptions are the documented ones.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>

#include "architecture/layering.h"
#include "test_util.h"

namespace megadlm::layering {
namespace {

namespace fs = std::filesystem;

const fs::path kSrc = fs::path(MEGADLM_SOURCE_DIR) / "src";
const fs::path kArchitecture = fs::path(MEGADLM_SOURCE_DIR) / "docs" / "ARCHITECTURE.md";

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "  " + x + "\n";
  return s;
}

TEST(Layering, SourcesFollowTheDocumentedLayers) {
  const std::vector<std::string> layers = documented_layers(kArchitecture);
  const std::vector<Include> includes = scan_includes(kSrc);
  ASSERT_GT(includes.size(), 500u) << "the scan found too few includes under " << kSrc;
  std::cout << "include matrix of src/ (docs/ARCHITECTURE.md's layers, top first):\n"
            << include_matrix(includes, layers);
  const std::vector<std::string> bad = violations(includes, layers, documented_exceptions(kArchitecture));
  EXPECT_TRUE(bad.empty()) << bad.size() << " includes break the layering:\n" << joined(bad);
}

TEST(Layering, EveryFolderOfSrcIsADocumentedLayer) {
  const std::vector<std::string> layers = documented_layers(kArchitecture);
  for (const auto& entry : fs::directory_iterator(kSrc)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    EXPECT_NE(std::find(layers.begin(), layers.end(), name), layers.end())
        << "src/" << name << "/ is not listed in the Layers block of docs/ARCHITECTURE.md";
  }
}

TEST(Layering, TheExceptionsAreFewAndExist) {
  const auto exceptions = documented_exceptions(kArchitecture);
  EXPECT_LE(exceptions.size(), 1u);
  for (const auto& [file, folder] : exceptions) EXPECT_TRUE(fs::exists(kSrc / file)) << "src/" << file;
}

// The checker itself: an upward include, a kernel reached around the backend, and an exception.
TEST(Layering, UpwardAndBackdoorIncludesAreCaught) {
  const std::vector<std::string> layers = {"apps", "train", "models", "nn", "parallel", "kernels", "core"};
  const std::vector<Include> includes = {
      {"parallel/grad_buckets.h", 3, "nn/linear.h"},           // up
      {"nn/mlp.cpp", 4, "kernels/cpu/elementwise.h"},          // around the backend
      {"kernels/backend_cpu.cpp", 5, "kernels/cpu/gemm.h"},    // the backend itself: fine
      {"kernels/cuda/nccl.cpp", 6, "parallel/communicator.h"}, // up, but documented below
      {"nn/mlp.cpp", 7, "kernels/backend.h"},                  // down: fine
      {"models/gpt.cpp", 8, "nn/linear.h"},                    // down: fine
      {"core/tensor.h", 9, "train/trainer.h"},                 // up
  };
  const std::vector<std::string> bad = violations(includes, layers, {{"kernels/cuda/nccl.cpp", "parallel"}});
  ASSERT_EQ(bad.size(), 3u) << joined(bad);
  EXPECT_NE(bad[0].find("parallel/grad_buckets.h:3"), std::string::npos) << bad[0];
  EXPECT_NE(bad[1].find("only through kernels/backend.h"), std::string::npos) << bad[1];
  EXPECT_NE(bad[2].find("core/tensor.h:9"), std::string::npos) << bad[2];
  // Without the exception the NCCL include is caught too.
  EXPECT_EQ(violations(includes, layers, {}).size(), 4u);
}

// The scan on a tree written here: an upward include added to a file is found with its line.
TEST(Layering, ScanFindsAnIncludeAddedToATree) {
  const fs::path root = fs::temp_directory_path() / ("megadlm_layering_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "nn");
  fs::create_directories(root / "train");
  std::ofstream(root / "nn" / "a.h") << "#pragma once\n#include <vector>\n#include \"core/tensor.h\"\n"
                                     << "  #  include \"train/trainer.h\"  // up\n#include \"b.h\"\n";
  std::ofstream(root / "train" / "t.cpp") << "#include \"nn/a.h\"\n";
  const std::vector<Include> includes = scan_includes(root);
  fs::remove_all(root);
  ASSERT_EQ(includes.size(), 3u);
  const std::vector<std::string> bad = violations(includes, {"train", "nn", "core"}, {});
  ASSERT_EQ(bad.size(), 1u) << joined(bad);
  EXPECT_NE(bad[0].find("nn/a.h:4 includes train/trainer.h"), std::string::npos) << bad[0];
}

TEST(Layering, FolderOfSplitsTheBackends) {
  EXPECT_EQ(folder_of("kernels/cpu/gemm.h"), "kernels/cpu");
  EXPECT_EQ(folder_of("kernels/cuda/ops.h"), "kernels/cuda");
  EXPECT_EQ(folder_of("kernels/backend.h"), "kernels");
  EXPECT_EQ(folder_of("nn/moe/moe_layer.h"), "nn");
}

}  // namespace
}  // namespace megadlm::layering
