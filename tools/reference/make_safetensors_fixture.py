#!/usr/bin/env python3
"""Writes tests/checkpoint/fixtures/small.safetensors with the reference `safetensors` package.

The C++ reader (src/checkpoint/safetensors.cpp) must load a file produced by the library everyone
else uses, not only files it wrote itself. The tensors cover every dtype the reader knows that torch
can produce, a 0-d tensor, an empty tensor, and metadata. The values are chosen so that the narrow
formats show their rounding (1/3 in bf16 and fp16); the expected values printed by this script are
hard-coded in tests/checkpoint/test_safetensors.cpp (SafetensorsFixture.*).

Usage: python3 tools/reference/make_safetensors_fixture.py [output path]
"""
import os
import sys

import torch
from safetensors.torch import save_file


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "checkpoint", "fixtures",
                                                             "small.safetensors")
    tensors = {
        # [2, 3] float32: exact binary fractions plus 0.1 (rounded to fp32 the same way in C++).
        "f32_matrix": torch.tensor([[0.5, -1.25, 3.0], [0.1, -0.0, 1024.0]], dtype=torch.float32),
        # [5] bfloat16: 1/3 and 0.1 round to nearest even; 3.140625 and -2.5 are exact.
        "bf16_vector": torch.tensor([1.0, -2.5, 1.0 / 3.0, 3.140625, 0.1], dtype=torch.bfloat16),
        # [2, 2] float16: the largest finite value, the smallest normal, 1/3 and -0.1.
        "f16_matrix": torch.tensor([[65504.0, 2.0 ** -14], [1.0 / 3.0, -0.1]], dtype=torch.float16),
        # [4] int32 including both extremes.
        "i32_vector": torch.tensor([0, -1, 2147483647, -2147483648], dtype=torch.int32),
        # [3] int64 with a value beyond 32 bits.
        "i64_vector": torch.tensor([7, -3, 1 << 40], dtype=torch.int64),
        # [2, 2, 2] uint8.
        "u8_cube": torch.arange(8, dtype=torch.uint8).reshape(2, 2, 2) * 31,
        # 0-d float32 scalar.
        "scalar": torch.tensor(-7.75, dtype=torch.float32),
        # empty [0, 3] float32.
        "empty": torch.zeros((0, 3), dtype=torch.float32),
    }
    metadata = {"producer": "make_safetensors_fixture.py", "purpose": "reader test"}
    save_file(tensors, out, metadata=metadata)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")
    for name, t in tensors.items():
        shown = t.float().flatten().tolist() if t.is_floating_point() else t.flatten().tolist()
        print(f"{name}: dtype={t.dtype} shape={list(t.shape)} values={[repr(v) for v in shown]}")
    # The raw bit patterns of the narrow formats, for an exact comparison.
    print("bf16 bits:", [hex(v & 0xffff) for v in tensors["bf16_vector"].view(torch.int16).tolist()])
    print("f16 bits:", [hex(v & 0xffff) for v in tensors["f16_matrix"].view(torch.int16).flatten().tolist()])


if __name__ == "__main__":
    main()
