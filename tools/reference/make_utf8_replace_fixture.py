"""Writes tests/tokenizers/fixtures/utf8_replace_expected.jsonl: byte strings and what Python's
bytes.decode('utf-8', 'replace') makes of them (one U+FFFD per maximal subpart of an ill-formed
sequence, as Rust's String::from_utf8_lossy and so HuggingFace's decode), both as hex, one per line:
{"bytes": "e282", "expected": "efbfbd"}. tests/tokenizers/test_utf8_replace.cpp checks
unicode::replace_invalid_utf8 against it without Python.

  python3 tools/reference/make_utf8_replace_fixture.py [OUT]
"""
import json
import os
import random
import sys

HAND_PICKED = [
    b"", b"plain ascii", "h\u00e9llo \u4e16\u754c \U0001F600".encode(),
    b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xc2\x41", b"\xc2\xc2\xa9",
    b"\xdf\xbf", b"\xe0", b"\xe0\x80", b"\xe0\x9f\x80", b"\xe0\xa0", b"\xe0\xa0\x80", b"\xe2\x82", b"\xe2\x82\xac",
    b"\xe2\x82a", b"\xe2\x82\xe2\x82\xac", b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xee\x80",
    b"\xef\xbf\xbf", b"\xf0", b"\xf0\x8f\xbf\xbf", b"\xf0\x90", b"\xf0\x90\x80", b"\xf0\x90\x80\x80",
    b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"\xf0\x9f\x98\x80\x80", b"\xf1\x80\x80", b"\xf3\xbf\xbf\xbf",
    b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
    b"\xff\xfe", b"a\x80b\xc3", "caf\u00e9".encode()[:-1], "\u4e16".encode()[:2] + b"!", b"\xe1\x80\xe1\x80\x80",
]

# Random strings from a byte alphabet rich in lead and continuation bytes, so that most hold both
# valid characters and every kind of ill-formed subpart.
ALPHABET = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1,
            0xF4, 0xF5, 0xFF]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "tests", "tokenizers", "fixtures", "utf8_replace_expected.jsonl")
    rng = random.Random(20240611)
    cases = list(HAND_PICKED)
    for _ in range(400):
        cases.append(bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))))
    with open(out, "w") as f:
        for b in cases:
            expected = b.decode("utf-8", "replace").encode("utf-8")
            f.write(json.dumps({"bytes": b.hex(), "expected": expected.hex()}) + "\n")


if __name__ == "__main__":
    main()
