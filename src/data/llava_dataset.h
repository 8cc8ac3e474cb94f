#pragma once
// LLaVA's training samples (--model-type llava, models/llava_model.h): the conversations of an SftDataset
// (padding layout: sample k is conversation order()[k], its document) with each stored image placeholder
// (one token an image, preprocess_data --image-key) expanded into P copies of it, the P positions its
// patch features take in the model's sequence. The loss mask is 0 there, as at the stored placeholder
// (prompt), so the objectives put no loss on image positions and diffusion never masks them. The
// expanded conversation must fit T + 1 tokens (an Error naming --seq-length otherwise; never truncated);
// the padding after it is the SftDataset's. The images of sample k are its document's, in the order of
// its placeholders.
// Legend: T the sequence length, P positions an image, n images.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/image_data.h"
#include "data/sft_dataset.h"
#include "data/token_dataset.h"

namespace megadlm {

// Writes in[0, len) to out with every `token` repeated P times and mask_in's value repeated with it
// (mask_in, mask_out may be null); returns the expanded length. out / mask_out hold `capacity`; an
// expansion longer than that is not written past it (the caller checks the returned length).
int64_t expand_image_placeholders(const int32_t* in, const uint8_t* mask_in, int64_t len, int32_t token, int64_t P,
                                  int32_t* out, uint8_t* mask_out, int64_t capacity);

class LlavaDataset : public TokenDataset {
 public:
  // Errors name the data when the images and the conversations are not aligned (check_aligned).
  LlavaDataset(std::shared_ptr<const SftDataset> conversations, std::shared_ptr<const ImageDataset> images,
               int64_t patches);

  int64_t size() const override { return conversations_->size(); }
  int64_t seq_length() const override { return conversations_->seq_length(); }
  void sample(int64_t i, int32_t* out) const override;  // out: [T + 1]
  bool has_loss_mask() const override { return true; }
  void sample_loss_mask(int64_t i, uint8_t* out) const override;  // out: [T + 1]

  int32_t image_token() const { return images_->token_id(); }
  int64_t image_size() const { return images_->height(); }
  int64_t images_in_sample(int64_t i) const;
  // The pixel values [n, 3, H, W] of samples [first, first + count), in order: n returned.
  int64_t batch_pixels(int64_t first, int64_t count, std::vector<float>& out) const;

 private:
  int64_t document_of(int64_t i) const;
  // Sample i expanded into tokens [T + 1] and mask [T + 1]; Errors name the data and --seq-length.
  void expanded(int64_t i, int32_t* tokens, uint8_t* mask) const;
  std::shared_ptr<const SftDataset> conversations_;
  std::shared_ptr<const ImageDataset> images_;
  int64_t patches_;
};

}  // namespace megadlm
