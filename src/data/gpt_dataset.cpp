#include "data/gpt_dataset.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/philox.h"
#include "data/philox_draws.h"
#include "data/sft_dataset.h"

namespace megadlm {

const char* split_name(Split s) {
  switch (s) {
    case Split::Train: return "train";
    case Split::Valid: return "valid";
    case Split::Test: return "test";
  }
  return "unknown";
}

// ---- --split -----------------------------------------------------------------------------------------

std::array<std::optional<SequenceRange>, 3> split_ranges(const std::string& split, int64_t num_sequences) {
  MEGADLM_CHECK(num_sequences >= 0, "split_ranges: negative sequence count ", num_sequences);
  std::vector<double> w;
  std::stringstream ss(split);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    MEGADLM_CHECK(a != std::string::npos, "--split '", split, "': empty weight");
    const std::string t = item.substr(a, b - a + 1);
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    MEGADLM_CHECK(end == t.c_str() + t.size() && std::isfinite(v), "--split '", split, "': '", t, "' is not a number");
    MEGADLM_CHECK(v >= 0, "--split '", split, "': weight ", v, " is negative");
    w.push_back(v);
  }
  MEGADLM_CHECK(!w.empty() && w.size() <= 3, "--split '", split, "' must give 1 to 3 weights (train,valid,test)");
  w.resize(3, 0.0);
  const double sum = w[0] + w[1] + w[2];
  MEGADLM_CHECK(sum > 0, "--split '", split, "': the weights add up to 0");
  // Same arithmetic as Megatron: normalise, then cumulative sums starting at 0.
  double c[4] = {0, 0, 0, 0};
  for (int k = 0; k < 3; ++k) c[k + 1] = c[k] + w[k] / sum;
  std::array<std::optional<SequenceRange>, 3> out;
  for (int k = 0; k < 3; ++k) {
    if (!(c[k + 1] > c[k])) continue;  // zero width: no dataset for this split
    // std::nearbyint rounds half to even under the default rounding mode, as Python's round does.
    const auto b = static_cast<int64_t>(std::nearbyint(c[k] * static_cast<double>(num_sequences)));
    const auto e = static_cast<int64_t>(std::nearbyint(c[k + 1] * static_cast<double>(num_sequences)));
    out[k] = SequenceRange{b, std::min(e, num_sequences)};
  }
  return out;
}

// ---- Philox shuffles ---------------------------------------------------------------------------------

template <typename T>
void philox_shuffle(T* a, int64_t n, uint64_t seed, uint32_t stream) {
  const CounterRng rng(seed, RngPurpose::DataShuffle);
  for (int64_t i = n - 1; i > 0; --i) {
    // j uniform in [0, i] (bias below 2^-40 for any n we can hold).
    const auto j = static_cast<int64_t>(
        draw_below(philox_bits64(rng.bits(static_cast<uint64_t>(i), stream)), static_cast<uint64_t>(i + 1)));
    std::swap(a[i], a[j]);
  }
}
template void philox_shuffle<int32_t>(int32_t*, int64_t, uint64_t, uint32_t);
template void philox_shuffle<int64_t>(int64_t*, int64_t, uint64_t, uint32_t);

namespace {

// Streams of the DataShuffle purpose used by one GPTDataset.
constexpr uint32_t kStreamDocuments = 0, kStreamDocumentsFinal = 1, kStreamSamples = 2, kStreamSamplesFinal = 3;

constexpr char kCacheMagic[8] = {'M', 'D', 'L', 'M', 'G', 'P', 'T', 'I'};
constexpr uint64_t kCacheVersion = 1;

}  // namespace

// ---- GPTDataset ----------------------------------------------------------------------------------------

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, SequenceRange range, Split split,
                       const GPTDatasetConfig& config)
    : data_(std::move(data)), range_(range), split_(split), config_(config) {
  MEGADLM_CHECK(data_ != nullptr, "GPTDataset: no indexed dataset");
  const std::string& prefix = data_->prefix();
  const int64_t T = config_.seq_length;
  MEGADLM_CHECK(T >= 1, "--seq-length ", T, " must be at least 1");
  MEGADLM_CHECK(range_.begin >= 0 && range_.begin <= range_.end && range_.end <= data_->num_sequences(), prefix,
                ": sequence range [", range_.begin, ", ", range_.end, ") is outside the ", data_->num_sequences(),
             " sequences");
  MEGADLM_CHECK(data_->num_sequences() <= std::numeric_limits<int32_t>::max(), prefix, ": ", data_->num_sequences(),
                " sequences exceed the int32 document index");

  int64_t tokens = 0;
  for (int64_t s = range_.begin; s < range_.end; ++s) tokens += data_->sequence_length(s);
  tokens_per_epoch_ = tokens;
  MEGADLM_CHECK(tokens >= 2, prefix, ": the ", split_name(split_), " split (sequences [", range_.begin, ", ", range_.end,
                ")) holds ", tokens, " tokens; at least 2 are needed to make a sample");

  // Epochs: enough that num_samples * T + 1 tokens are available.
  if (config_.num_samples <= 0) {
    num_epochs_ = 1;
  } else {
    MEGADLM_CHECK(config_.num_samples <= (std::numeric_limits<int64_t>::max() - 1) / T, "num_samples ",
                  config_.num_samples, " times seq_length ", T, " overflows");
    const int64_t need = config_.num_samples * T + 1;
    num_epochs_ = (need + tokens - 1) / tokens;
  }
  MEGADLM_CHECK(num_epochs_ <= std::numeric_limits<int64_t>::max() / tokens &&
                 num_epochs_ <= (int64_t(1) << 40) / std::max<int64_t>(range_.size(), 1),
                prefix, ": ", config_.num_samples, " samples of ", T, " tokens need ", num_epochs_, " epochs over ",
                range_.size(), " sequences, which is more than can be indexed");
  samples_total_ = (num_epochs_ * tokens - 1) / T;
  MEGADLM_CHECK(samples_total_ >= 1, prefix, ": the ", split_name(split_), " split holds ", tokens,
                " tokens, fewer than one sample of ", T, " + 1");
  separate_final_epoch_ = false;
  samples_sans_final_ = samples_total_;
  if (num_epochs_ > 1) {
    samples_sans_final_ = ((num_epochs_ - 1) * tokens - 1) / T;
    const int64_t from_final = config_.num_samples - samples_sans_final_;
    const int64_t per_epoch = (tokens - 1) / T;
    separate_final_epoch_ = from_final < static_cast<int64_t>(0.8 * static_cast<double>(per_epoch));
    if (!separate_final_epoch_) samples_sans_final_ = samples_total_;
  }

  std::error_code ec;
  const std::string abs_prefix = std::filesystem::absolute(prefix, ec).lexically_normal().string();
  std::ostringstream d;
  d << "GPTDataset indices v" << kCacheVersion << "\n"
    << "path: " << (ec ? prefix : abs_prefix) << "\n"
    << "sequences: " << data_->num_sequences() << "\n"
    << "tokens: " << data_->total_tokens() << "\n"
    << "split: " << split_name(split_) << " [" << range_.begin << ", " << range_.end << ")\n"
    << "seq_length: " << T << "\n"
    << "num_samples: " << config_.num_samples << "\n"
    << "seed: " << config_.seed << "\n"
    << "shuffle: philox4x32-10 DataShuffle\n";
  description_ = d.str();

  if (!config_.cache_dir.empty()) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(description_)));
    cache_file_ = (std::filesystem::path(config_.cache_dir) /
                   (std::string(hash) + "-GPTDataset-" + split_name(split_) + ".indices"))
                      .string();
    if (try_load(cache_file_)) {
      loaded_from_cache_ = true;
      return;
    }
  }
  build();
  if (!cache_file_.empty()) {
    std::filesystem::create_directories(config_.cache_dir, ec);
    if (ec) fail(config_.cache_dir, ": cannot create the data cache directory (", ec.message(), ")");
    save(cache_file_);
  }
}

void GPTDataset::build() {
  const int64_t T = config_.seq_length;
  const int64_t n_docs = range_.size();

  // Document index: epochs of the range, shuffled together; the separated final epoch on its own.
  document_index_.resize(static_cast<size_t>(num_epochs_ * n_docs));
  for (int64_t e = 0; e < num_epochs_; ++e)
    for (int64_t k = 0; k < n_docs; ++k) document_index_[e * n_docs + k] = static_cast<int32_t>(range_.begin + k);
  if (separate_final_epoch_) {
    philox_shuffle(document_index_.data(), (num_epochs_ - 1) * n_docs, config_.seed, kStreamDocuments);
    philox_shuffle(document_index_.data() + (num_epochs_ - 1) * n_docs, n_docs, config_.seed, kStreamDocumentsFinal);
  } else {
    philox_shuffle(document_index_.data(), num_epochs_ * n_docs, config_.seed, kStreamDocuments);
  }

  // Sample index (helpers.cpp build_sample_idx with drop_last_partial_sequence and the extra token):
  // walk the documents, each sample consuming T tokens and peeking at one more.
  sample_index_.assign(static_cast<size_t>(2 * (samples_total_ + 1)), 0);
  int64_t pos = 0;     // position in document_index_
  int64_t offset = 0;  // token offset inside that document
  sample_index_[0] = 0;
  sample_index_[1] = 0;
  const auto n_pos = static_cast<int64_t>(document_index_.size());
  for (int64_t s = 1; s <= samples_total_; ++s) {
    int64_t remaining = T + 1;
    while (remaining != 0) {
      const int64_t doc_len = data_->sequence_length(document_index_[pos]) - offset;
      remaining -= doc_len;
      if (remaining <= 0) {
        // The sample ends inside this document; the next one starts on its last (peeked) token.
        offset += remaining + doc_len - 1;
        remaining = 0;
      } else {
        MEGADLM_CHECK(pos + 1 < n_pos, data_->prefix(), ": internal error: ran out of documents building sample ", s);
        ++pos;
        offset = 0;
      }
    }
    sample_index_[2 * s] = pos;
    sample_index_[2 * s + 1] = offset;
  }

  // Shuffle index.
  shuffle_index_.resize(static_cast<size_t>(samples_total_));
  for (int64_t i = 0; i < samples_total_; ++i) shuffle_index_[i] = i;
  philox_shuffle(shuffle_index_.data(), samples_sans_final_, config_.seed, kStreamSamples);
  if (samples_sans_final_ < samples_total_)
    philox_shuffle(shuffle_index_.data() + samples_sans_final_, samples_total_ - samples_sans_final_, config_.seed,
                   kStreamSamplesFinal);
}

template <typename Read>
void GPTDataset::walk_sample(int64_t i, Read&& read) const {
  const int64_t T = config_.seq_length;
  MEGADLM_CHECK(i >= 0 && i < size(), data_->prefix(), ": ", split_name(split_), " sample ", i, " out of range [0, ",
                size(), ")");
  const int64_t j = shuffle_index_[i];
  const int64_t p0 = sample_index_[2 * j], o0 = sample_index_[2 * j + 1];
  const int64_t p1 = sample_index_[2 * j + 2], o1 = sample_index_[2 * j + 3];
  int64_t written = 0;
  for (int64_t p = p0; p <= p1; ++p) {
    const int32_t seq = document_index_[p];
    const int64_t from = p == p0 ? o0 : 0;
    const int64_t to = p == p1 ? o1 + 1 : data_->sequence_length(seq);  // exclusive
    const int64_t n = to - from;
    MEGADLM_CHECK(n >= 0 && written + n <= T + 1, data_->prefix(), ": sample ", i, " is inconsistent (corrupt indices)");
    read(seq, from, n, written);
    written += n;
  }
  MEGADLM_CHECK(written == T + 1, data_->prefix(), ": sample ", i, " has ", written, " tokens instead of ", T + 1,
                " (corrupt indices)");
}

void GPTDataset::sample(int64_t i, int32_t* out) const {
  walk_sample(i, [&](int64_t seq, int64_t from, int64_t n, int64_t at) { data_->read(seq, from, n, out + at); });
}

void GPTDataset::sample_loss_mask(int64_t i, uint8_t* out) const {
  MEGADLM_CHECK(loss_mask_ != nullptr, data_->prefix(), ": no loss mask attached (not --sft data)");
  walk_sample(i, [&](int64_t seq, int64_t from, int64_t n, int64_t at) {
    read_loss_mask(*loss_mask_, seq, from, n, out + at);
  });
}

// ---- cache file: magic, version, description, then the three arrays ------------------------------------

void GPTDataset::save(const std::string& path) const {
  const uint64_t desc_len = description_.size(), n_doc = document_index_.size(), n_sample = sample_index_.size(),
                 n_shuffle = shuffle_index_.size();
  std::vector<uint8_t> buf;
  buf.reserve(8 + 8 * 5 + desc_len + 4 * n_doc + 8 * (n_sample + n_shuffle));
  auto put = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + bytes);
  };
  put(kCacheMagic, 8);
  put(&kCacheVersion, 8);
  put(&desc_len, 8);
  put(description_.data(), desc_len);
  put(&n_doc, 8);
  put(&n_sample, 8);
  put(&n_shuffle, 8);
  put(document_index_.data(), 4 * n_doc);
  put(sample_index_.data(), 8 * n_sample);
  put(shuffle_index_.data(), 8 * n_shuffle);
  write_file_atomic(path, buf.data(), buf.size());
}

bool GPTDataset::try_load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  auto reject = [&](const std::string& why) {
    log_info(path, ": ignoring the cached indices (", why, "); rebuilding them");
    document_index_.clear();
    sample_index_.clear();
    shuffle_index_.clear();
    return false;
  };
  MappedFile f(path);
  const uint8_t* p = f.data();
  uint64_t at = 0;
  const uint64_t size = f.size();
  auto get64 = [&](uint64_t& v) {
    if (size - at < 8) return false;
    std::memcpy(&v, p + at, 8);
    at += 8;
    return true;
  };
  if (size < 8 || std::memcmp(p, kCacheMagic, 8) != 0) return reject("bad magic");
  at = 8;
  uint64_t version = 0, desc_len = 0, n_doc = 0, n_sample = 0, n_shuffle = 0;
  if (!get64(version) || version != kCacheVersion) return reject("unknown version");
  if (!get64(desc_len) || desc_len > size - at) return reject("truncated");
  if (std::string(reinterpret_cast<const char*>(p + at), desc_len) != description_)
    return reject("made for other parameters");
  at += desc_len;
  if (!get64(n_doc) || !get64(n_sample) || !get64(n_shuffle)) return reject("truncated");
  const int64_t n_docs = range_.size();
  if (n_doc != static_cast<uint64_t>(num_epochs_ * n_docs) || n_sample != static_cast<uint64_t>(2 * (samples_total_ + 1)) ||
      n_shuffle != static_cast<uint64_t>(samples_total_))
    return reject("array sizes do not match the parameters");
  if (size - at != 4 * n_doc + 8 * n_sample + 8 * n_shuffle) return reject("file size does not match its arrays");
  document_index_.resize(n_doc);
  sample_index_.resize(n_sample);
  shuffle_index_.resize(n_shuffle);
  std::memcpy(document_index_.data(), p + at, 4 * n_doc);
  at += 4 * n_doc;
  std::memcpy(sample_index_.data(), p + at, 8 * n_sample);
  at += 8 * n_sample;
  std::memcpy(shuffle_index_.data(), p + at, 8 * n_shuffle);

  // Every entry must point inside the data, so that sample() can never read out of bounds.
  for (int32_t d : document_index_)
    if (d < range_.begin || d >= range_.end) return reject("document index entry outside the split");
  int64_t prev_p = 0, prev_o = 0;
  for (uint64_t s = 0; s < n_sample / 2; ++s) {
    const int64_t sp = sample_index_[2 * s], so = sample_index_[2 * s + 1];
    if (sp < 0 || sp >= static_cast<int64_t>(n_doc) || so < 0 || so > data_->sequence_length(document_index_[sp]))
      return reject("sample index entry out of range");
    if (sp < prev_p || (sp == prev_p && so < prev_o)) return reject("sample index not monotone");
    prev_p = sp;
    prev_o = so;
  }
  std::vector<bool> seen(n_shuffle, false);
  for (int64_t v : shuffle_index_) {
    if (v < 0 || static_cast<uint64_t>(v) >= n_shuffle || seen[v]) return reject("shuffle index is not a permutation");
    seen[v] = true;
  }
  return true;
}

}  // namespace megadlm
