#!/usr/bin/env python3
"""A tiny random LlavaForConditionalGeneration (no download) with transformers' logits, for
tests/checkpoint/test_hf_llava.cpp:

  tests/checkpoint/fixtures/hf_llava/   CLIP vision tower: image 8, patch 4 (P = 4 patches), hidden 16, 2 layers,
                                        2 heads, intermediate 32, quick_gelu; the projector linear_1 (16 -> 16),
                                        GELU (erf), linear_2 (16 -> 16) with biases; a LLaMA text model: vocab 48,
                                        hidden 16, 2 layers, 4 heads of 4 with 2 key/value heads (GQA),
                                        intermediate 32, untied lm_head; image_token_index 47,
                                        vision_feature_layer -2, strategy "default"; fp32, as save_pretrained
                                        writes it (transformers 5 saves the legacy names: vision_tower.,
                                        multi_modal_projector., language_model.model., language_model.lm_head.)
    logits.safetensors   input_ids I32 [2, 12] (one image, P = 4 image tokens, per sequence, at different
                         places), pixel_values F32 [2, 3, 8, 8] (normal(0, 1)), and transformers' logits from
                         the stored weights in float64 (eager attention), stored F32 [2, 12, 48]
  tests/checkpoint/fixtures/hf_llava_qwen2/   the same with a Qwen2 text model of the same sizes (q/k/v biases)
                                        and tie_word_embeddings (the lm_head is the embedding), and its logits

Every parameter (norm weights and biases, class and position embeddings included) is redrawn from
normal(0, 0.2) so that a mapping error anywhere shows in the logits. The metadata records the versions.

Usage: python3 tools/reference/make_llava_fixture.py [--out tests/checkpoint/fixtures] [--text llama qwen2]
"""
import argparse
import os

import torch
import transformers as tf
from safetensors.torch import save_file

IMAGE = 47
INPUT_IDS = [[1, 5, IMAGE, IMAGE, IMAGE, IMAGE, 9, 10, 11, 12, 13, 14],
             [1, 3, 4, 5, 6, IMAGE, IMAGE, IMAGE, IMAGE, 20, 21, 22]]


def text_config(family):
    sizes = dict(vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, bos_token_id=1,
                 eos_token_id=2)
    if family == "llama":
        return tf.LlamaConfig(tie_word_embeddings=False, **sizes)
    return tf.Qwen2Config(tie_word_embeddings=True, **sizes)


def build(family):
    vision = tf.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 image_size=8, patch_size=4, num_channels=3, hidden_act="quick_gelu",
                                 layer_norm_eps=1e-5, projection_dim=16)
    text = text_config(family)
    cfg = tf.LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE, image_seq_length=4,
                         projector_hidden_act="gelu", vision_feature_layer=-2,
                         vision_feature_select_strategy="default", multimodal_projector_bias=True)
    torch.manual_seed(5)
    model = tf.LlavaForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def write_fixture(out_dir, family):
    meta = {"transformers": tf.__version__, "torch": torch.__version__}
    build(family).save_pretrained(out_dir, safe_serialization=True)
    ref = tf.LlavaForConditionalGeneration.from_pretrained(out_dir, attn_implementation="eager").double().eval()
    torch.manual_seed(3)
    pixels = torch.randn(2, 3, 8, 8)
    ids = torch.tensor(INPUT_IDS, dtype=torch.int64)
    with torch.no_grad():
        logits = ref(input_ids=ids, pixel_values=pixels.double(), attention_mask=torch.ones_like(ids)).logits
    tensors = {"input_ids": ids.to(torch.int32), "pixel_values": pixels, "logits": logits.float().contiguous()}
    save_file(tensors, os.path.join(out_dir, "logits.safetensors"), metadata=meta)
    print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}")


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "tests", "checkpoint", "fixtures"))
    ap.add_argument("--text", nargs="+", choices=["llama", "qwen2"], default=["llama", "qwen2"],
                    help="the text models whose fixtures to write")
    args = ap.parse_args()
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    for family in args.text:
        write_fixture(os.path.join(args.out, "hf_llava" if family == "llama" else "hf_llava_" + family), family)


if __name__ == "__main__":
    main()
