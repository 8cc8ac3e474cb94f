// GPTDataset (Megatron semantics: document / sample / shuffle indices), --split, the index cache, the
// blended dataset and the batch loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::error_of;
using test::TempDir;

constexpr int32_t kEod = 9999;

// Writes `n_docs` documents; document d holds tokens d*10000 + position (so every token says where it
// came from) ending with kEod; lengths vary from 1 to 40 and one sequence is empty.
std::vector<std::vector<int32_t>> write_corpus(const std::string& prefix, int n_docs, uint64_t seed) {
  CounterRng rng(seed, RngPurpose::Test);
  std::vector<std::vector<int32_t>> seqs;
  IndexedDatasetWriter w(prefix, IndexDType::I32);
  for (int d = 0; d < n_docs; ++d) {
    const int len = d == 3 ? 0 : 1 + static_cast<int>(rng.uniform(d, 0) * 40);
    std::vector<int32_t> doc(len);
    for (int k = 0; k + 1 < len; ++k) doc[k] = d * 10000 + k + 1;
    if (len > 0) doc[len - 1] = kEod;
    // A zero-length sequence (not an empty document): Megatron-format data may hold one.
    w.add_document(doc.data(), len, std::vector<int32_t>{len});
    seqs.push_back(doc);
  }
  w.finalize();
  return seqs;
}

// The token stream the sample index cuts: the documents in document-index order.
std::vector<int32_t> flat_stream(const GPTDataset& ds, const std::vector<std::vector<int32_t>>& seqs) {
  std::vector<int32_t> s;
  for (int32_t d : ds.document_index()) s.insert(s.end(), seqs[d].begin(), seqs[d].end());
  return s;
}

std::vector<int32_t> get_sample(const TokenDataset& ds, int64_t i) {
  std::vector<int32_t> out(static_cast<size_t>(ds.seq_length() + 1), -7);  // poisoned
  ds.sample(i, out.data());
  return out;
}

}  // namespace

TEST(Split, MegatronRanges) {
  auto r = split_ranges("969,30,1", 1000);
  ASSERT_TRUE(r[0] && r[1] && r[2]);
  EXPECT_EQ(r[0]->begin, 0);
  EXPECT_EQ(r[0]->end, 969);
  EXPECT_EQ(r[1]->begin, 969);
  EXPECT_EQ(r[1]->end, 999);
  EXPECT_EQ(r[2]->begin, 999);
  EXPECT_EQ(r[2]->end, 1000);
  r = split_ranges("98, 2", 10);  // the missing test weight is 0: no test split
  ASSERT_TRUE(r[0] && r[1]);
  EXPECT_FALSE(r[2]);
  EXPECT_EQ(r[0]->end, 10);  // round(9.8) = 10
  EXPECT_EQ(r[1]->size(), 0);
  r = split_ranges("1,1", 3);  // 1.5 rounds half to even -> 2, as Python's round
  EXPECT_EQ(r[0]->end, 2);
  r = split_ranges("1,1", 5);  // 2.5 -> 2
  EXPECT_EQ(r[0]->end, 2);
  r = split_ranges("1", 7);
  EXPECT_EQ(r[0]->end, 7);
  EXPECT_FALSE(r[1]);
  for (const char* bad : {"a,b", "-1,2", "0,0", "1,2,3,4", "1,,2"})
    EXPECT_NE(error_of([&] { split_ranges(bad, 10); }).find("--split"), std::string::npos) << bad;
}

TEST(GPTDataset, SamplesAreConsecutiveWindowsOfTheShuffledStream) {
  TempDir dir("windows");
  const auto seqs = write_corpus(dir / "c", 57, 1);
  auto data = std::make_shared<const IndexedDataset>(dir / "c");
  for (int64_t T : {1, 7, 13, 64}) {
    SCOPED_TRACE(T);
    GPTDatasetConfig cfg;
    cfg.seq_length = T;
    cfg.seed = 5;
    const GPTDataset ds(data, {0, data->num_sequences()}, Split::Train, cfg);
    EXPECT_EQ(ds.num_epochs(), 1);
    const std::vector<int32_t> stream = flat_stream(ds, seqs);
    ASSERT_EQ(static_cast<int64_t>(stream.size()), ds.tokens_per_epoch());
    EXPECT_EQ(ds.size(), (ds.tokens_per_epoch() - 1) / T);  // the last partial sample is dropped
    // Each document of the split appears exactly once per epoch.
    std::vector<int32_t> sorted = ds.document_index();
    std::sort(sorted.begin(), sorted.end());
    for (int32_t k = 0; k < 57; ++k) EXPECT_EQ(sorted[k], k);
    // Sample i is the window [j*T, j*T + T + 1) of the stream with j = shuffle_index[i].
    std::set<int64_t> seen;
    for (int64_t i = 0; i < ds.size(); ++i) {
      const int64_t j = ds.shuffle_index()[i];
      seen.insert(j);
      const std::vector<int32_t> want(stream.begin() + j * T, stream.begin() + j * T + T + 1);
      ASSERT_EQ(get_sample(ds, i), want) << "sample " << i;
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), ds.size());  // a permutation
  }
}

TEST(GPTDataset, SamplesSpanDocumentsWithEod) {
  TempDir dir("span");
  write_corpus(dir / "c", 40, 2);
  auto data = std::make_shared<const IndexedDataset>(dir / "c");
  GPTDatasetConfig cfg;
  cfg.seq_length = 50;
  const GPTDataset ds(data, {0, data->num_sequences()}, Split::Train, cfg);
  int spanning = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const auto s = get_sample(ds, i);
    // An eod inside the sample, followed by tokens of another document.
    for (size_t k = 0; k + 1 < s.size(); ++k)
      if (s[k] == kEod && s[k + 1] != kEod) {
        ++spanning;
        break;
      }
  }
  EXPECT_GT(spanning, ds.size() / 2);
}

TEST(GPTDataset, DeterministicBySeedAndMultiEpoch) {
  TempDir dir("epochs");
  const auto seqs = write_corpus(dir / "c", 31, 3);
  auto data = std::make_shared<const IndexedDataset>(dir / "c");
  const SequenceRange all{0, data->num_sequences()};
  GPTDatasetConfig cfg;
  cfg.seq_length = 9;
  cfg.seed = 77;
  const int64_t per_epoch = (GPTDataset(data, all, Split::Train, cfg).tokens_per_epoch() - 1) / 9;
  // 3.5 epochs' worth: the final half epoch is below 80% of an epoch, so it is shuffled on its own.
  cfg.num_samples = per_epoch * 7 / 2;
  const GPTDataset a(data, all, Split::Train, cfg), b(data, all, Split::Train, cfg);
  EXPECT_EQ(a.num_epochs(), 4);
  EXPECT_GE(a.size(), cfg.num_samples);
  EXPECT_EQ(a.document_index(), b.document_index());
  EXPECT_EQ(a.sample_index(), b.sample_index());
  EXPECT_EQ(a.shuffle_index(), b.shuffle_index());
  // Every document appears once per epoch, and the final epoch is a permutation by itself.
  std::map<int32_t, int> count;
  for (int32_t d : a.document_index()) ++count[d];
  for (int32_t d = 0; d < 31; ++d) EXPECT_EQ(count[d], 4);
  std::vector<int32_t> last(a.document_index().end() - 31, a.document_index().end());
  std::sort(last.begin(), last.end());
  for (int32_t d = 0; d < 31; ++d) EXPECT_EQ(last[d], d);
  // The first samples of the shuffle come from the first three epochs only.
  const int64_t sans_final = (3 * a.tokens_per_epoch() - 1) / 9;
  for (int64_t i = 0; i < sans_final; ++i) ASSERT_LT(a.shuffle_index()[i], sans_final);
  const std::vector<int32_t> stream = flat_stream(a, seqs);
  for (int64_t i = 0; i < a.size(); i += 7) {
    const int64_t j = a.shuffle_index()[i];
    ASSERT_EQ(get_sample(a, i), std::vector<int32_t>(stream.begin() + j * 9, stream.begin() + j * 9 + 10));
  }
  // Another seed: another order.
  cfg.seed = 78;
  const GPTDataset c(data, all, Split::Train, cfg);
  EXPECT_NE(a.document_index(), c.document_index());
  EXPECT_NE(a.shuffle_index(), c.shuffle_index());
}

TEST(GPTDataset, CachedIndicesReloadIdentically) {
  TempDir dir("cache");
  write_corpus(dir / "c", 45, 4);
  auto data = std::make_shared<const IndexedDataset>(dir / "c");
  const auto ranges = split_ranges("8,2", data->num_sequences());
  GPTDatasetConfig cfg;
  cfg.seq_length = 11;
  cfg.num_samples = 300;
  cfg.cache_dir = dir / "cache";
  const GPTDataset built(data, *ranges[0], Split::Train, cfg);
  EXPECT_FALSE(built.loaded_from_cache());
  ASSERT_TRUE(fs::exists(built.cache_file()));
  const GPTDataset loaded(data, *ranges[0], Split::Train, cfg);
  EXPECT_TRUE(loaded.loaded_from_cache());
  EXPECT_EQ(loaded.cache_file(), built.cache_file());
  ASSERT_EQ(loaded.size(), built.size());
  EXPECT_EQ(loaded.document_index(), built.document_index());
  EXPECT_EQ(loaded.sample_index(), built.sample_index());
  EXPECT_EQ(loaded.shuffle_index(), built.shuffle_index());
  for (int64_t i = 0; i < built.size(); ++i) ASSERT_EQ(get_sample(loaded, i), get_sample(built, i));
  // Other parameters or another split: another file.
  const GPTDataset valid(data, *ranges[1], Split::Valid, cfg);
  EXPECT_NE(valid.cache_file(), built.cache_file());
  for (int32_t d : valid.document_index()) EXPECT_GE(d, ranges[1]->begin);
  cfg.seed += 1;
  const GPTDataset other(data, *ranges[0], Split::Train, cfg);
  EXPECT_NE(other.cache_file(), built.cache_file());
  cfg.seed -= 1;
  // A corrupted cache is rebuilt, not trusted.
  {
    std::fstream f(built.cache_file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-16, std::ios::end);
    const int64_t junk = 1 << 30;
    f.write(reinterpret_cast<const char*>(&junk), 8);
  }
  const GPTDataset rebuilt(data, *ranges[0], Split::Train, cfg);
  EXPECT_FALSE(rebuilt.loaded_from_cache());
  EXPECT_EQ(rebuilt.shuffle_index(), built.shuffle_index());
  // ... and a truncated one too.
  fs::resize_file(built.cache_file(), 100);
  const GPTDataset rebuilt2(data, *ranges[0], Split::Train, cfg);
  EXPECT_FALSE(rebuilt2.loaded_from_cache());
  EXPECT_EQ(rebuilt2.sample_index(), built.sample_index());
  EXPECT_TRUE(GPTDataset(data, *ranges[0], Split::Train, cfg).loaded_from_cache());
}

TEST(GPTDataset, ErrorsNameTheProblem) {
  TempDir dir("errors");
  write_corpus(dir / "c", 5, 5);
  auto data = std::make_shared<const IndexedDataset>(dir / "c");
  GPTDatasetConfig cfg;
  cfg.seq_length = 4;
  EXPECT_NE(error_of([&] { GPTDataset(data, {3, 4}, Split::Valid, cfg); }).find("holds 0 tokens"), std::string::npos);
  EXPECT_NE(error_of([&] { GPTDataset(data, {0, 9}, Split::Train, cfg); }).find("outside"), std::string::npos);
  cfg.seq_length = 0;
  EXPECT_NE(error_of([&] { GPTDataset(data, {0, 5}, Split::Train, cfg); }).find("--seq-length"), std::string::npos);
  cfg.seq_length = 4;
  const GPTDataset ds(data, {0, 5}, Split::Train, cfg);
  std::vector<int32_t> out(5);
  EXPECT_NE(error_of([&] { ds.sample(ds.size(), out.data()); }).find("out of range"), std::string::npos);
}

// After every prefix of n samples, each dataset has had within one sample of its share w_i * n.
TEST(Blend, SharesWithinOneSampleForEveryPrefix) {
  CounterRng rng(9, RngPurpose::Test);
  for (int trial = 0; trial < 60; ++trial) {
    const int k = 1 + trial % 7;
    std::vector<double> w(k);
    for (int i = 0; i < k; ++i) w[i] = std::pow(static_cast<double>(rng.uniform(trial, i)), 1 + trial % 4) + 1e-3;
    if (trial % 10 == 0) std::fill(w.begin(), w.end(), 1.0);
    double sum = 0;
    for (double x : w) sum += x;
    std::vector<int16_t> di;
    std::vector<int64_t> dsi64;
    const int64_t n = 3001;
    build_blending_indices(w, n, di, dsi64);
    std::vector<int64_t> c(k, 0);
    double worst = 0;
    for (int64_t m = 0; m < n; ++m) {
      ASSERT_EQ(dsi64[m], c[di[m]]) << "the running count per dataset";
      ++c[di[m]];
      for (int i = 0; i < k; ++i) worst = std::max(worst, std::fabs(static_cast<double>(c[i]) - w[i] / sum * (m + 1)));
    }
    EXPECT_LT(worst, 1.0) << "trial " << trial << " with " << k << " datasets";
    std::vector<int16_t> again;
    std::vector<int64_t> again64;
    build_blending_indices(w, n, again, again64);
    EXPECT_EQ(again, di);
  }
}

TEST(Blend, BlendedSamplesComeFromTheScheduledDataset) {
  TempDir dir("blend");
  write_corpus(dir / "a", 30, 6);
  write_corpus(dir / "b", 50, 7);
  const DataBlend blend = parse_data_path({"0.3", dir / "a", "0.7", dir / "b"});
  GPTDatasetConfig cfg;
  cfg.seq_length = 8;
  cfg.seed = 3;
  auto train = build_gpt_split_dataset(blend, "9,1", Split::Train, 400, cfg);
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), 400);
  const auto* bl = dynamic_cast<const BlendedDataset*>(train.get());
  ASSERT_NE(bl, nullptr);
  EXPECT_NEAR(bl->weights()[0], 0.3, 1e-12);
  // The parts, built the same way, give the same samples.
  auto da = std::make_shared<const IndexedDataset>(dir / "a");
  auto db = std::make_shared<const IndexedDataset>(dir / "b");
  GPTDatasetConfig ca = cfg, cb = cfg;
  ca.num_samples = static_cast<int64_t>(std::ceil(std::ceil(400 * 0.3) * 1.005));
  cb.num_samples = static_cast<int64_t>(std::ceil(std::ceil(400 * 0.7) * 1.005));
  const GPTDataset pa(da, *split_ranges("9,1", 30)[0], Split::Train, ca);
  const GPTDataset pb(db, *split_ranges("9,1", 50)[0], Split::Train, cb);
  for (int64_t i = 0; i < 400; ++i) {
    const GPTDataset& part = bl->dataset_index()[i] == 0 ? pa : pb;
    ASSERT_EQ(get_sample(*train, i), get_sample(part, bl->dataset_sample_index()[i]));
  }
  EXPECT_EQ(build_gpt_split_dataset(blend, "1,0,0", Split::Valid, 10, cfg), nullptr);
  auto valid = build_gpt_dataset_whole(parse_data_path({dir / "a"}), Split::Valid, 0, cfg);
  ASSERT_NE(valid, nullptr);
  EXPECT_GT(valid->size(), 0);
  // Too few samples in a part is an Error naming that dataset.
  std::vector<std::shared_ptr<const TokenDataset>> parts{std::make_shared<GPTDataset>(da, SequenceRange{0, 30}, Split::Train, cfg)};
  parts.push_back(parts[0]);
  const std::string msg = error_of([&] { BlendedDataset(parts, {1.0, 1.0}, 4 * parts[0]->size()); });
  EXPECT_NE(msg.find("blend dataset 0"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse_data_path({"x", "p"}); }).find("'x' is not a weight"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_data_path({"0.5", "p", "q"}); }).find("pairs"), std::string::npos);
}

TEST(Loader, SameBatchesWithAndWithoutPrefetchAndExactResume) {
  TempDir dir("loader");
  write_corpus(dir / "c", 60, 8);
  auto data = std::make_shared<const IndexedDataset>(dir / "c");
  GPTDatasetConfig cfg;
  cfg.seq_length = 6;
  cfg.num_samples = 200;
  auto ds = std::make_shared<const GPTDataset>(data, SequenceRange{0, 60}, Split::Train, cfg);
  const int64_t B = 3, P = 2;
  auto take = [&](bool prefetch, int64_t consumed, int64_t rank, int n) {
    LoaderConfig lc;
    lc.micro_batch_size = B;
    lc.consumed_samples = consumed;
    lc.dp_rank = rank;
    lc.dp_size = P;
    lc.prefetch = prefetch;
    BatchLoader loader(ds, lc);
    std::vector<SampleBatch> out;
    for (int i = 0; i < n; ++i) out.push_back(loader.next());
    EXPECT_EQ(loader.consumed_samples(), consumed + n * B * P);
    return out;
  };
  const auto plain = take(false, 0, 1, 8), fetched = take(true, 0, 1, 8);
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(plain[k].tokens, fetched[k].tokens);
    EXPECT_EQ(plain[k].first_sample, fetched[k].first_sample);
    ASSERT_EQ(plain[k].tokens.size(), static_cast<size_t>(B * 7));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t id = static_cast<int64_t>(plain[k].first_sample) + b;  // row b is sample first_sample + b
      EXPECT_EQ(id, k * B * P + 1 * B + b);  // Megatron's sampler order
      const auto s = get_sample(*ds, id);
      EXPECT_TRUE(std::equal(s.begin(), s.end(), plain[k].tokens.begin() + b * 7));
    }
  }
  // Ranks 0 and 1 share the global batch without overlap.
  const auto r0 = take(true, 0, 0, 1);
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(static_cast<int64_t>(r0[0].first_sample) + b, b);
  // Resuming from consumed_samples continues the same stream.
  const auto resumed = take(true, 3 * B * P, 1, 5);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(resumed[k].tokens, plain[k + 3].tokens);
  // Running past the end is an Error naming the sample, with or without prefetch.
  for (bool prefetch : {false, true}) {
    LoaderConfig lc;
    lc.micro_batch_size = 50;
    lc.consumed_samples = ds->size() - 60;
    lc.prefetch = prefetch;
    BatchLoader loader(ds, lc);
    loader.next();
    const std::string msg = error_of([&] { loader.next(); });
    EXPECT_NE(msg.find("needs sample"), std::string::npos) << msg;
  }
}
