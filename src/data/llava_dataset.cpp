#include "data/llava_dataset.h"

#include <algorithm>

#include "core/error.h"

namespace megadlm {

int64_t expand_image_placeholders(const int32_t* in, const uint8_t* mask_in, int64_t len, int32_t token, int64_t P,
                                  int32_t* out, uint8_t* mask_out, int64_t capacity) {
  int64_t n = 0;
  for (int64_t i = 0; i < len; ++i) {
    const int64_t copies = in[i] == token ? P : 1;
    for (int64_t c = 0; c < copies; ++c, ++n) {
      if (n >= capacity) continue;
      out[n] = in[i];
      if (mask_out) mask_out[n] = mask_in ? mask_in[i] : 0;
    }
  }
  return n;
}

LlavaDataset::LlavaDataset(std::shared_ptr<const SftDataset> conversations, std::shared_ptr<const ImageDataset> images,
                           int64_t patches)
    : conversations_(std::move(conversations)), images_(std::move(images)), patches_(patches) {
  MEGADLM_CHECK(conversations_ && images_ && patches_ >= 1, "LlavaDataset: no conversations, no images or no patches");
  images_->check_aligned(conversations_->data());
}

int64_t LlavaDataset::document_of(int64_t i) const {
  MEGADLM_CHECK(i >= 0 && i < size(), conversations_->data().prefix(), ": sample ", i, " out of range [0, ", size(), ")");
  return document_of_sequence(conversations_->data(), conversations_->order()[static_cast<size_t>(i)]);
}

int64_t LlavaDataset::images_in_sample(int64_t i) const { return images_->images_in_document(document_of(i)); }

void LlavaDataset::expanded(int64_t i, int32_t* tokens, uint8_t* mask) const {
  const int64_t T = seq_length();
  const int32_t seq = conversations_->order()[static_cast<size_t>(i)];
  const int64_t len = conversations_->data().sequence_length(seq);
  std::vector<int32_t> t(static_cast<size_t>(T + 1));
  std::vector<uint8_t> m(static_cast<size_t>(T + 1));
  conversations_->sample(i, t.data());
  conversations_->sample_loss_mask(i, m.data());
  const int64_t n = expand_image_placeholders(t.data(), m.data(), len, image_token(), patches_, tokens, mask, T + 1);
  const int64_t doc = document_of(i);
  const int64_t placeholders = (n - len) / std::max<int64_t>(1, patches_ - 1);
  MEGADLM_CHECK(patches_ == 1 || placeholders == images_->images_in_document(doc), conversations_->data().prefix(),
                ": conversation ", doc + 1, " has ", placeholders, " image placeholders but ",
                images_->images_in_document(doc), " images");
  MEGADLM_CHECK(n <= T + 1, conversations_->data().prefix(), ": conversation ", doc + 1, " is ", n,
                " tokens with each image's ", patches_, " positions, more than --seq-length ", T,
                " + 1; --sft never truncates a conversation: raise --seq-length");
  // The padding after it: the SftDataset's pad token and pad mask (or nothing, when it filled T + 1).
  std::fill(tokens + n, tokens + T + 1, len <= T ? t[static_cast<size_t>(T)] : 0);
  std::fill(mask + n, mask + T + 1, len <= T ? m[static_cast<size_t>(T)] : 0);
}

void LlavaDataset::sample(int64_t i, int32_t* out) const {
  std::vector<uint8_t> mask(static_cast<size_t>(seq_length() + 1));
  expanded(i, out, mask.data());
}

void LlavaDataset::sample_loss_mask(int64_t i, uint8_t* out) const {
  std::vector<int32_t> tokens(static_cast<size_t>(seq_length() + 1));
  expanded(i, tokens.data(), out);
}

int64_t LlavaDataset::batch_pixels(int64_t first, int64_t count, std::vector<float>& out) const {
  const int64_t per_image = 3 * images_->height() * images_->width();
  int64_t n = 0;
  for (int64_t i = first; i < first + count; ++i) n += images_in_sample(i);
  out.resize(static_cast<size_t>(n * per_image));
  int64_t k = 0;
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t doc = document_of(i);
    images_->pixel_values(doc, out.data() + k * per_image);
    k += images_->images_in_document(doc);
  }
  return n;
}

}  // namespace megadlm
