// The byte-level BPE model: the byte map, the hash tables (merges, spellings, bytes), the piece
// caches and the merge loops.
#include "tokenizers/byte_level_bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>

#include <sys/mman.h>

#include "core/error.h"
#include "tokenizers/unicode.h"

namespace megadlm {

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : shifted++;
    }
    return t;
  }();
  return table;
}

namespace {
// Inverse of byte_to_unicode over code points 0..323; -1 where a code point stands for no byte.
const std::array<int16_t, 324>& unicode_to_byte() {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return table;
}

// Appends the raw bytes of a vocabulary spelling; true when every character is in the byte map.
bool append_spelling_bytes(std::string_view token, std::string& out) {
  bool pure = true;
  const std::array<int16_t, 324>& to_byte = unicode_to_byte();
  const auto* s = reinterpret_cast<const uint8_t*>(token.data());
  for (size_t i = 0; i < token.size();) {
    uint32_t cp;
    const int len = unicode::decode_utf8(s + i, token.size() - i, &cp);
    if (cp < 324 && to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(to_byte[cp]));
    } else {
      out.append(token.substr(i, len));
      pure = false;
    }
    i += len;
  }
  return pure;
}

// A fast 64-bit hash of a short byte string (never 0: 0 marks an empty cache slot).
inline uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h | 1;
}

constexpr uint32_t kNoRank = 0xFFFFFFFFu;
std::atomic<uint64_t> g_next_instance{1};
std::atomic<uint64_t> g_next_cache{1};

// Whether the kernel gives transparent huge pages to memory advised with MADV_HUGEPAGE (setting
// "always" or "madvise"; not "never", nor where the file is absent).
bool huge_pages_on_advice() {
  static const bool on = [] {
    std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char buf[128] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const std::string_view s(buf, n);
    return s.find("[always]") != std::string_view::npos || s.find("[madvise]") != std::string_view::npos;
  }();
  return on;
}

// Zero-filled memory straight from the kernel, for hash tables. Blocks of 1 MiB or more are 2 MiB-
// aligned and advised as transparent huge pages: a table of random accesses then costs one page fault
// per 2 MiB instead of 512 (page faults weigh on the tokenizer's start-up, and two threads faulting on
// one memory map slow each other down). Without huge pages, `prefault` touches the pages in order at
// once, as filling a std::vector would (faults in random order, as a hash table's inserts make them,
// cost more); otherwise a page costs nothing until it is used.
class ZeroedBlock {
 public:
  ZeroedBlock(size_t bytes, bool prefault) : bytes_(std::max<size_t>(bytes, 1)) {
    constexpr size_t kHuge = size_t{2} << 20;
    const bool huge = bytes_ >= kHuge / 2 && huge_pages_on_advice();
    const size_t rounded = (bytes_ + kHuge - 1) / kHuge * kHuge;
    mapped_ = huge ? rounded + kHuge : bytes_;  // room to align to 2 MiB
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(p);
    data_ = base_;
    if (huge) {
      data_ = base_ + ((kHuge - reinterpret_cast<uintptr_t>(base_) % kHuge) % kHuge);
#ifdef MADV_HUGEPAGE
      ::madvise(data_, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
    } else if (prefault) {
      std::memset(data_, 0, bytes_);
    }
  }
  ~ZeroedBlock() { ::munmap(base_, mapped_); }
  ZeroedBlock(const ZeroedBlock&) = delete;
  ZeroedBlock& operator=(const ZeroedBlock&) = delete;
  void* data() const { return data_; }

 private:
  size_t bytes_, mapped_ = 0;
  char* base_ = nullptr;
  char* data_ = nullptr;
};
}  // namespace

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) unicode::append_utf8(byte_to_unicode()[b], out);
  return out;
}

std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  append_spelling_bytes(token, out);
  return out;
}

// (id_a, id_b) -> (rank, merged id), open addressing with linear probing at load <= 1/2. One lookup
// per candidate pair is the inner loop of BPE, so this avoids std::unordered_map's node chasing. The
// slots live in zeroed memory (a stored key is the pair + 1, so 0 marks an empty slot): building the
// table touches only the pages its entries land on, in huge pages where the kernel allows.
struct ByteLevelBPE::MergeTable {
  struct Slot {
    uint64_t key;  // key(a, b) + 1; 0 = empty
    uint32_t rank;
    int32_t merged;
  };
  std::unique_ptr<ZeroedBlock> mem;
  Slot* slots = nullptr;
  uint64_t mask = 0;

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    mem = std::make_unique<ZeroedBlock>(cap * sizeof(Slot), /*prefault=*/true);
    slots = static_cast<Slot*>(mem->data());
    mask = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) {  // ids are >= 0, so key + 1 never wraps to 0
    return ((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b)) + 1;
  }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    k ^= k >> 29;
    return k;
  }
  void prefetch(int32_t a, int32_t b) const { __builtin_prefetch(&slots[mix(key(a, b)) & mask]); }
  void put(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
    const uint64_t k = key(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == 0 || slots[i].key == k) {
        slots[i] = Slot{k, rank, merged};  // a repeated pair takes the later rank
        return;
      }
    }
  }
  const Slot* get(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.key == k) return &s;
      if (s.key == 0) return nullptr;
    }
  }
};

// Piece bytes -> ids for the pieces seen recently, one per thread and tokenizer: the fallback once the
// shared cache below is full (huge or very varied corpora). Cleared when full (cheap, and keeps memory
// flat). The slot array is a ZeroedBlock: its pages cost nothing until a slot on them is used.
struct ByteLevelBPE::WordCache {
  struct Slot {
    uint64_t hash;  // 0 = empty
    uint32_t key_off, ids_off;
    uint16_t key_len, ids_len;
  };
  static constexpr size_t kSlots = size_t{1} << 17;
  static constexpr size_t kMaxEntries = kSlots / 2;
  ZeroedBlock mem{kSlots * sizeof(Slot), /*prefault=*/true};
  Slot* slots = static_cast<Slot*>(mem.data());
  std::string keys;
  std::vector<int32_t> ids;
  size_t entries = 0;

  void clear() {
    std::memset(slots, 0, kSlots * sizeof(Slot));
    keys.clear();
    ids.clear();
    entries = 0;
  }
  // The ids of piece p[0, len) (hash h), or nullptr; *ids_len is set on a hit.
  const int32_t* find(uint64_t h, const uint8_t* p, size_t len, size_t* ids_len) const {
    for (uint64_t i = (h >> 1) & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == h && s.key_len == len && std::memcmp(keys.data() + s.key_off, p, len) == 0) {
        *ids_len = s.ids_len;
        return ids.data() + s.ids_off;
      }
    }
  }
  void insert(uint64_t h, const uint8_t* p, size_t len, const int32_t* piece_ids, size_t n_ids) {
    if (entries >= kMaxEntries) clear();
    uint64_t i = (h >> 1) & (kSlots - 1);
    while (slots[i].hash != 0) i = (i + 1) & (kSlots - 1);
    slots[i] = Slot{h, static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(ids.size()),
                    static_cast<uint16_t>(len), static_cast<uint16_t>(n_ids)};
    keys.append(reinterpret_cast<const char*>(p), len);
    ids.insert(ids.end(), piece_ids, piece_ids + n_ids);
    ++entries;
  }
};

// Piece bytes -> ids, one per tokenizer and shared by all threads that encode with it, so that a word
// one worker has merged is not merged again by another. Insert-only and lock-free:
//   - an entry is written once into `arena` at a word offset reserved by fetch_add, never moved:
//     [header: key_len | ids_len << 16][ids_len ids][key bytes, padded to a word];
//   - a slot holds (high 32 bits of the piece's hash) << 32 | the entry's offset (0 = empty; offset 0
//     is never used); it is published with a release CAS after the entry is written, and readers
//     load it with acquire, so a reader that sees the slot sees the whole entry;
//   - when the slots reach half load or the arena is used up, it takes no more entries (`full`) and
//     the per-thread caches take the misses.
// The trade: a worker no longer merges the words another has seen, but it reads entries another core
// wrote. That gains only with (1) the slot array in huge pages (ZeroedBlock: 4 KiB pages filled by two
// threads at once fault on one memory map), (2) each thread writing its entries into arena blocks of
// its own and (3) the counters that inserts write on a cache line apart from the fields that look-ups
// read (docs/bench/decisions.md).
struct ByteLevelBPE::SharedWordCache {
  static constexpr size_t kMaxKeyLen = 128;  // longer pieces are rare: not worth caching
  static constexpr size_t kBlockWords = 1024;  // 4 KiB, a page
  static constexpr size_t kEntryBatch = 64;

  size_t mask, max_entries, arena_words;
  std::unique_ptr<ZeroedBlock> slots_mem, arena_mem;
  uint64_t* slots = nullptr;  // [mask + 1], accessed through std::atomic_ref
  uint32_t* arena = nullptr;  // [arena_words]
  const uint64_t id = g_next_cache.fetch_add(1);  // keys the threads' arena blocks (never reused)
  std::atomic<bool> full{false};                   // written once
  // The counters every insert writes, on a cache line of their own: beside the fields above (read by
  // every look-up) they would make that line bounce between the cores.
  alignas(64) std::atomic<size_t> entries{0};      // entries handed out in batches (past max_entries: full)
  std::atomic<size_t> arena_used{kBlockWords};     // words handed out; block 0 unused so that no slot is 0
  char pad_[64 - 2 * sizeof(std::atomic<size_t>)];  // nothing else on the counters' line

  explicit SharedWordCache(size_t max_entries_) : max_entries(std::max<size_t>(max_entries_, 1)) {
    size_t cap = 16;
    while (cap < 2 * max_entries) cap <<= 1;
    mask = cap - 1;
    // Room for the average piece (GPT-2 on English: ~8 bytes, ~1.3 ids -> ~5 words) with a wide
    // margin, plus the partly filled blocks of up to 64 threads.
    arena_words = 16 * max_entries + 64 * kBlockWords;
    if (arena_words > 0xFFFFFFFFull) arena_words = 0xFFFFFFFFull;  // offsets are 32-bit
    // The slots are used all over (prefaulted without huge pages); the arena only as far as it fills.
    slots_mem = std::make_unique<ZeroedBlock>(cap * sizeof(uint64_t), /*prefault=*/true);
    arena_mem = std::make_unique<ZeroedBlock>(arena_words * sizeof(uint32_t), /*prefault=*/false);
    slots = static_cast<uint64_t*>(slots_mem->data());
    arena = static_cast<uint32_t*>(arena_mem->data());
  }

  // Room for one more entry of `words` words, for this thread: its arena offset, or 0 when the cache
  // is full. Each thread takes arena blocks of kBlockWords and entry counts in batches of
  // kEntryBatch, and uses them alone: entries written by two threads never share a cache line, and
  // the shared counters are written once per block or batch instead of once per insert. (A thread
  // that goes back and forth among more than 4 caches drops its remainders: the cache fills sooner.)
  size_t reserve(size_t words) {
    struct Quota {
      uint64_t cache_id = 0;
      size_t next = 0, end = 0;  // arena words [next, end)
      size_t entries_left = 0;
    };
    thread_local std::array<Quota, 4> quotas;
    thread_local unsigned victim = 0;
    Quota* q = nullptr;
    for (Quota& x : quotas)
      if (x.cache_id == id) q = &x;
    if (!q) {
      q = &quotas[victim++ % quotas.size()];
      *q = Quota{id, 0, 0, 0};
    }
    if (q->entries_left == 0) {
      const size_t first = entries.fetch_add(kEntryBatch, std::memory_order_relaxed);
      if (first >= max_entries) return 0;
      q->entries_left = std::min(kEntryBatch, max_entries - first);
    }
    if (q->next + words > q->end) {
      const size_t start = arena_used.fetch_add(kBlockWords, std::memory_order_relaxed);
      if (start + kBlockWords > arena_words) return 0;
      q->next = start;
      q->end = start + kBlockWords;
    }
    --q->entries_left;
    const size_t off = q->next;
    q->next += words;
    return off;
  }

  std::atomic_ref<uint64_t> slot(size_t i) const { return std::atomic_ref<uint64_t>(slots[i]); }

  // True when the entry at word offset `off` has the key p[0, len).
  bool holds(uint32_t off, const uint8_t* p, size_t len) const {
    const uint32_t* e = arena + off;
    return (e[0] & 0xFFFF) == len && std::memcmp(e + 1 + (e[0] >> 16), p, len) == 0;
  }
  // The ids of piece p[0, len) (hash h), or nullptr; *ids_len is set on a hit.
  const int32_t* find(uint64_t h, const uint8_t* p, size_t len, size_t* ids_len) const {
    const uint64_t tag = h & 0xFFFFFFFF00000000ull;
    for (uint64_t i = (h >> 1) & mask;; i = (i + 1) & mask) {
      const uint64_t v = slot(i).load(std::memory_order_acquire);
      if (v == 0) return nullptr;
      const auto off = static_cast<uint32_t>(v);
      if ((v & 0xFFFFFFFF00000000ull) == tag && holds(off, p, len)) {
        const uint32_t* e = arena + off;
        *ids_len = e[0] >> 16;
        return reinterpret_cast<const int32_t*>(e + 1);
      }
    }
  }
  // Adds the piece (when another thread added it meanwhile, its entry stays and ours is wasted
  // space); false when the cache is full.
  bool insert(uint64_t h, const uint8_t* p, size_t len, const int32_t* ids, size_t n_ids) {
    if (full.load(std::memory_order_relaxed)) return false;
    const size_t off = reserve(1 + n_ids + (len + 3) / 4);
    if (off == 0) {
      full.store(true, std::memory_order_relaxed);
      return false;
    }
    uint32_t* e = arena + off;
    e[0] = static_cast<uint32_t>(len | (n_ids << 16));
    std::memcpy(e + 1, ids, n_ids * sizeof(int32_t));
    std::memcpy(e + 1 + n_ids, p, len);
    const uint64_t v = (h & 0xFFFFFFFF00000000ull) | off;
    for (uint64_t i = (h >> 1) & mask;; i = (i + 1) & mask) {
      uint64_t seen = 0;
      if (slot(i).compare_exchange_strong(seen, v, std::memory_order_release, std::memory_order_acquire))
        return true;
      if ((seen >> 32) == (v >> 32) && holds(static_cast<uint32_t>(seen), p, len)) return true;
    }
  }
};

// Spelling or raw bytes -> id by open addressing over ids; the keys themselves stay in the tokenizer's
// key string (spellings or token bytes) and look-ups by string_view allocate nothing. Loading merges
// does three look-ups per merge (150k for GPT-2), where std::unordered_map<std::string> cost a string
// and a node chase each.
struct ByteLevelBPE::StringIndex {
  struct Slot {
    uint32_t tag;     // high half of the key's hash
    int32_t id_plus;  // id + 1; 0 = empty (zeroed memory, as MergeTable's)
  };
  std::unique_ptr<ZeroedBlock> mem;
  Slot* slots = nullptr;
  uint64_t mask = 0;

  explicit StringIndex(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    mem = std::make_unique<ZeroedBlock>(cap * sizeof(Slot), /*prefault=*/true);
    slots = static_cast<Slot*>(mem->data());
    mask = cap - 1;
  }
  static uint64_t hash(std::string_view key) {
    return hash_bytes(reinterpret_cast<const uint8_t*>(key.data()), key.size());
  }
  void prefetch(uint64_t h) const { __builtin_prefetch(&slots[(h >> 1) & mask]); }
  // The id whose key (text[off[id], off[id+1])) equals `key`, or -1.
  int32_t find(std::string_view key, const std::string& text, const std::vector<uint32_t>& off) const {
    return find(key, hash(key), text, off);
  }
  // The same with the key's hash() computed already.
  int32_t find(std::string_view key, uint64_t h, const std::string& text, const std::vector<uint32_t>& off) const {
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t i = (h >> 1) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.id_plus == 0) return -1;
      const int32_t id = s.id_plus - 1;
      if (s.tag == tag && off[id + 1] - off[id] == key.size() &&
          std::memcmp(text.data() + off[id], key.data(), key.size()) == 0)
        return id;
    }
  }
  // Adds the key of `id` (whose hash() is h); returns the id that already has an equal key (nothing
  // added), else -1.
  int32_t insert(int32_t id, uint64_t h, const std::string& text, const std::vector<uint32_t>& off) {
    const std::string_view key(text.data() + off[id], off[id + 1] - off[id]);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t i = (h >> 1) & mask;; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.id_plus == 0) {
        s = Slot{tag, id + 1};
        return -1;
      }
      const int32_t other = s.id_plus - 1;
      if (s.tag == tag && off[other + 1] - off[other] == key.size() &&
          std::memcmp(text.data() + off[other], key.data(), key.size()) == 0)
        return other;
    }
  }
};

namespace {
template <typename Pairs>
auto as_views(const Pairs& pairs) {
  using First = std::string_view;
  using Second = std::conditional_t<std::is_same_v<typename Pairs::value_type::second_type, std::string>,
                                    std::string_view, typename Pairs::value_type::second_type>;
  std::vector<std::pair<First, Second>> v;
  v.reserve(pairs.size());
  for (const auto& [a, b] : pairs) v.emplace_back(a, b);
  return v;
}
}  // namespace

ByteLevelBPE::ByteLevelBPE(const std::vector<std::pair<std::string, int32_t>>& vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                           const std::string& source)
    : ByteLevelBPE(as_views(vocab), as_views(merges), ignore_merges, source) {}

ByteLevelBPE::ByteLevelBPE(const std::vector<std::pair<std::string_view, int32_t>>& vocab,
                           const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                           bool ignore_merges, const std::string& source, int threads)
    : ignore_merges_(ignore_merges),
      shared_cache_(std::make_unique<SharedWordCache>(kSharedCacheEntries)),
      instance_id_(g_next_instance.fetch_add(1)) {
  MEGADLM_CHECK(!vocab.empty(), source, ": the vocabulary is empty");
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    MEGADLM_CHECK(id >= 0, source, ": token '", tok, "' has negative id ", id);
    max_id = std::max(max_id, id);
  }
  // Tables have a slot per id: ids far beyond the number of tokens (a hostile file's 999999999) would
  // allocate gigabytes for nothing. Real vocabularies are dense; a few gaps are allowed.
  const int64_t id_limit = 2 * static_cast<int64_t>(vocab.size()) + 1024;
  MEGADLM_CHECK(max_id < id_limit, source, ": id ", max_id, " is out of range (the vocabulary has ", vocab.size(),
                " tokens; ids must be below 2 x that + 1024)");
  // Spellings by id, so that spellings and bytes are both laid out in id order.
  std::vector<std::string_view> spelling_of(max_id + 1);
  present_.assign(max_id + 1, 0);
  size_t total = 0;
  for (const auto& [tok, id] : vocab) {
    MEGADLM_CHECK(!present_[id], source, ": id ", id, " is used by both '", spelling_of[id], "' and '", tok, "'");
    present_[id] = 1;
    spelling_of[id] = tok;
    total += tok.size();
  }
  MEGADLM_CHECK(total < (size_t{1} << 32), source, ": the tokens take ", total, " bytes (at most 4 GiB)");
  // The two indices are independent: raw bytes -> id (encoding) and spelling -> id (the merges below).
  // Each is built in batches with prefetches, as the merges (whose comment says why).
  constexpr int32_t kBatch = 16;
  auto build_bytes_index = [&] {
    token_bytes_.reserve(total);  // a token's bytes are never longer than its spelling
    token_offset_.assign(max_id + 2, 0);
    std::vector<uint8_t> pure(max_id + 1);
    for (int32_t id = 0; id <= max_id; ++id) {
      pure[id] = append_spelling_bytes(spelling_of[id], token_bytes_);
      token_offset_[id + 1] = static_cast<uint32_t>(token_bytes_.size());
    }
    bytes_to_id_ = std::make_unique<StringIndex>(vocab.size());
    uint64_t hash_t[kBatch];
    for (int32_t id0 = 0; id0 <= max_id; id0 += kBatch) {
      const int32_t nb = std::min(kBatch, max_id + 1 - id0);
      for (int32_t k = 0; k < nb; ++k) {
        hash_t[k] = StringIndex::hash(token_bytes(id0 + k));
        bytes_to_id_->prefetch(hash_t[k]);
      }
      // Only true byte-level spellings are BPE results; a token such as "<|endoftext|>" is both, and a
      // spelling outside the byte map (a special written in plain UTF-8) never comes out of BPE.
      // Distinct byte-level spellings have distinct bytes, so no key repeats here.
      for (int32_t k = 0; k < nb; ++k)
        if (present_[id0 + k] && pure[id0 + k]) bytes_to_id_->insert(id0 + k, hash_t[k], token_bytes_, token_offset_);
    }
  };
  // With a second thread the bytes index is built there; the join comes before anything reads it.
  std::exception_ptr bytes_error;
  std::thread bytes_thread;
  if (threads > 1) {
    bytes_thread = std::thread([&] {
      try {
        build_bytes_index();
      } catch (...) {
        bytes_error = std::current_exception();
      }
    });
  } else {
    build_bytes_index();
  }
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{bytes_thread};

  spelling_text_.reserve(total);
  spelling_offset_.assign(max_id + 2, 0);
  for (int32_t id = 0; id <= max_id; ++id) {
    spelling_text_ += spelling_of[id];
    spelling_offset_[id + 1] = static_cast<uint32_t>(spelling_text_.size());
  }
  spelling_to_id_ = std::make_unique<StringIndex>(vocab.size());
  uint64_t hash_s[kBatch];
  for (int32_t id0 = 0; id0 <= max_id; id0 += kBatch) {
    const int32_t nb = std::min(kBatch, max_id + 1 - id0);
    for (int32_t k = 0; k < nb; ++k) {
      hash_s[k] = StringIndex::hash(spelling(id0 + k));
      spelling_to_id_->prefetch(hash_s[k]);
    }
    for (int32_t k = 0; k < nb; ++k) {
      const int32_t id = id0 + k;
      if (!present_[id]) continue;
      const int32_t twin = spelling_to_id_->insert(id, hash_s[k], spelling_text_, spelling_offset_);
      MEGADLM_CHECK(twin < 0, source, ": token '", spelling_of[id], "' is given twice (ids ", twin, " and ", id, ")");
    }
  }
  // Every byte needs a token; checked through the spelling index (a one-byte token is spelled by the
  // byte map, and every spelling made of byte-map characters is a byte-level token) so that the error
  // comes before any merge's.
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    unicode::append_utf8(byte_to_unicode()[b], spelling);
    const int32_t id = id_of(spelling);
    if (id < 0)
      fail(source, ": the vocabulary has no token for byte ", b, " (spelled '", spelling,
           "'): a byte-level vocabulary needs all 256 (truncated vocabulary?)");
    byte_id_[b] = id;
  }
  build_merges(merges, max_id, source);
  if (bytes_thread.joinable()) bytes_thread.join();
  if (bytes_error) std::rethrow_exception(bytes_error);
}

void ByteLevelBPE::build_merges(const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                                int32_t max_id, const std::string& source) {
  constexpr int32_t kBatch = 16;
  merges_ = std::make_unique<MergeTable>(merges.size());
  // Loading is bound by cache misses on the hash tables (a random slot per look-up), so merges go in
  // batches: hashes and prefetches for the whole batch first, then the look-ups, then the inserts,
  // which lets the misses of a batch overlap.
  uint64_t hash_a[kBatch], hash_b[kBatch];
  int32_t id_a[kBatch], id_b[kBatch], id_m[kBatch];
  std::string joined;
  // Vocabularies list merge results in merge order (GPT-2: merge r makes id 256 + r), so the id of
  // the previous result plus one is checked first, which saves most hash look-ups of a + b.
  int64_t guess = 0;
  for (size_t r0 = 0; r0 < merges.size(); r0 += static_cast<size_t>(kBatch)) {
    const size_t nb = std::min<size_t>(kBatch, merges.size() - r0);
    for (size_t k = 0; k < nb; ++k) {
      hash_a[k] = StringIndex::hash(merges[r0 + k].first);
      hash_b[k] = StringIndex::hash(merges[r0 + k].second);
      spelling_to_id_->prefetch(hash_a[k]);
      spelling_to_id_->prefetch(hash_b[k]);
    }
    for (size_t k = 0; k < nb; ++k) {
      const size_t r = r0 + k;
      // Not a structured binding: the lambda below captures a and b, which clang < 16 rejects.
      const std::string_view a = merges[r].first, b = merges[r].second;
      const int32_t ia = spelling_to_id_->find(a, hash_a[k], spelling_text_, spelling_offset_);
      const int32_t ib = spelling_to_id_->find(b, hash_b[k], spelling_text_, spelling_offset_);
      joined.assign(a);
      joined += b;
      int32_t im = -1;
      if (guess + static_cast<int64_t>(r) >= 0 && guess + static_cast<int64_t>(r) <= max_id) {
        const auto g = static_cast<int32_t>(guess + static_cast<int64_t>(r));
        if (present_[g] && spelling(g) == joined) im = g;
      }
      if (im < 0) im = id_of(joined);
      if (im >= 0) guess = static_cast<int64_t>(im) - static_cast<int64_t>(r);
      auto where = [&] { return detail::concat(source, ": merge ", r + 1, " ('", a, " ", b, "'): "); };
      MEGADLM_CHECK(ia >= 0, where(), "'", a, "' is not in the vocabulary");
      MEGADLM_CHECK(ib >= 0, where(), "'", b, "' is not in the vocabulary");
      MEGADLM_CHECK(im >= 0, where(), "the merged token '", joined, "' is not in the vocabulary");
      id_a[k] = ia, id_b[k] = ib, id_m[k] = im;
      merges_->prefetch(ia, ib);
    }
    for (size_t k = 0; k < nb; ++k) merges_->put(id_a[k], id_b[k], static_cast<uint32_t>(r0 + k), id_m[k]);
  }
}

ByteLevelBPE::~ByteLevelBPE() = default;

void ByteLevelBPE::set_shared_cache_capacity(size_t max_entries) {
  shared_cache_ = std::make_unique<SharedWordCache>(max_entries);
}

size_t ByteLevelBPE::shared_cache_entries() const {
  return std::min(shared_cache_->entries.load(std::memory_order_relaxed), shared_cache_->max_entries);
}

int32_t ByteLevelBPE::id_of(std::string_view spelling) const {
  return spelling_to_id_->find(spelling, spelling_text_, spelling_offset_);
}

int32_t ByteLevelBPE::id_of_bytes(std::string_view raw) const {
  return bytes_to_id_->find(raw, token_bytes_, token_offset_);
}

inline uint32_t ByteLevelBPE::pair_rank(int32_t a, int32_t b, int32_t* merged) const {
  const MergeTable::Slot* s = merges_->get(a, b);
  if (!s) return kNoRank;
  *merged = s->merged;
  return s->rank;
}

// Quadratic but tight for short pieces (almost all of them): the rank of every neighbouring pair sits
// in an array; each step merges the leftmost pair of lowest rank and looks up only the two new pairs.
void ByteLevelBPE::merge_small(std::vector<int32_t>& sym) const {
  size_t m = sym.size();
  if (m < 2) return;
  thread_local std::vector<uint32_t> rank;
  thread_local std::vector<int32_t> merged;
  rank.resize(m - 1);
  merged.resize(m - 1);
  for (size_t k = 0; k + 1 < m; ++k) rank[k] = pair_rank(sym[k], sym[k + 1], &merged[k]);
  while (m > 1) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < m; ++k)
      if (rank[k] < rank[best]) best = k;
    if (rank[best] == kNoRank) break;
    sym[best] = merged[best];
    // Remove symbol best+1 and pair best; pairs best-1 and best (new neighbours) change.
    for (size_t k = best + 1; k + 1 < m; ++k) sym[k] = sym[k + 1];
    for (size_t k = best; k + 2 < m; ++k) rank[k] = rank[k + 1], merged[k] = merged[k + 1];
    --m;
    if (best > 0) rank[best - 1] = pair_rank(sym[best - 1], sym[best], &merged[best - 1]);
    if (best + 1 < m) rank[best] = pair_rank(sym[best], sym[best + 1], &merged[best]);
  }
  sym.resize(m);
}

// O(n log n) for long pieces (a 100k-character run has no spaces to split it): symbols in a linked
// list, candidate pairs in a min-heap by (rank, position); an entry is stale when either symbol has
// changed since it was pushed (ids only grow into longer tokens, so equal ids mean the same pair).
void ByteLevelBPE::merge_large(std::vector<int32_t>& sym) const {
  const int32_t m = static_cast<int32_t>(sym.size());
  if (m < 2) return;
  struct Cand {
    uint32_t rank;
    int32_t pos, left, right, merged;
  };
  auto worse = [](const Cand& x, const Cand& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
  thread_local std::vector<int32_t> next, prev;
  thread_local std::vector<Cand> heap;
  next.resize(m);
  prev.resize(m);
  heap.clear();
  for (int32_t i = 0; i < m; ++i) next[i] = i + 1 < m ? i + 1 : -1, prev[i] = i - 1;
  auto push = [&](int32_t pos, int32_t right_pos) {
    Cand c{0, pos, sym[pos], sym[right_pos], -1};
    c.rank = pair_rank(c.left, c.right, &c.merged);
    if (c.rank == kNoRank) return;
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int32_t i = 0; i + 1 < m; ++i) push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Cand c = heap.back();
    heap.pop_back();
    const int32_t r = next[c.pos];
    if (sym[c.pos] != c.left || r < 0 || sym[r] != c.right) continue;  // stale
    sym[c.pos] = c.merged;
    sym[r] = -1;  // dead
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos], c.pos);
    if (next[c.pos] >= 0) push(c.pos, next[c.pos]);
  }
  int32_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) sym[out++] = sym[i];
  sym.resize(out);
}

void ByteLevelBPE::encode_uncached(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const int32_t whole = id_of_bytes(std::string_view(reinterpret_cast<const char*>(p), n));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  sym.resize(n);
  for (size_t i = 0; i < n; ++i) sym[i] = byte_id_[p[i]];
  if (n <= 48) {
    merge_small(sym);
  } else {
    merge_large(sym);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

ByteLevelBPE::WordCache& ByteLevelBPE::thread_cache() const {
  struct Entry {
    uint64_t owner = 0;
    std::unique_ptr<WordCache> cache;
  };
  thread_local std::array<Entry, 4> entries;
  thread_local unsigned victim = 0;
  for (Entry& e : entries)
    if (e.owner == instance_id_) return *e.cache;
  Entry& e = entries[victim++ % entries.size()];
  e.owner = instance_id_;
  if (e.cache) {
    e.cache->clear();
  } else {
    e.cache = std::make_unique<WordCache>();
  }
  return *e.cache;
}

void ByteLevelBPE::encode_piece(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  encode_pieces(nullptr, p, n, out);
}

void ByteLevelBPE::encode_text(PretokenizerPattern pattern, const uint8_t* p, size_t n,
                               std::vector<int32_t>& out) const {
  encode_pieces(&pattern, p, n, out);
}

void ByteLevelBPE::encode_pieces(const PretokenizerPattern* pattern, const uint8_t* text, size_t n,
                                 std::vector<int32_t>& out) const {
  SharedWordCache& shared = *shared_cache_;
  // The per-thread cache only once the shared one is full (its misses go there from then on).
  WordCache* local = shared.full.load(std::memory_order_relaxed) ? &thread_cache() : nullptr;
  for (size_t i = 0; i < n;) {
    const size_t e = pattern ? next_piece(*pattern, text, n, i) : n;
    const uint8_t* p = text + i;
    const size_t len = e - i;
    i = e;
    if (len == 1) {
      out.push_back(byte_id_[p[0]]);
      continue;
    }
    if (len > SharedWordCache::kMaxKeyLen) {
      encode_uncached(p, len, out);
      continue;
    }
    const uint64_t h = hash_bytes(p, len);
    size_t n_ids = 0;
    const int32_t* hit = shared.find(h, p, len, &n_ids);
    if (!hit && local) hit = local->find(h, p, len, &n_ids);
    if (hit) {
      out.insert(out.end(), hit, hit + n_ids);
      continue;
    }
    const size_t before = out.size();
    encode_uncached(p, len, out);
    if (!shared.insert(h, p, len, out.data() + before, out.size() - before)) {
      if (!local) local = &thread_cache();
      local->insert(h, p, len, out.data() + before, out.size() - before);
    }
  }
}

}  // namespace megadlm
