#!/usr/bin/env python3
"""Writes src/tokenizers/unicode_tables.inc: the code-point ranges of the character classes the BPE
pre-tokenizer regexes use, \\p{L} (letters), \\p{N} (numbers) and \\s (whitespace), and the data of
NFC normalization (the normalizer of GPT-NeoX and Qwen2 tokenizer.json files): canonical combining
classes, full canonical decompositions, primary compositions and the quick-check "not Yes" set.

The classes come from Python's unicodedata. HuggingFace `tokenizers` matches its regexes with
Oniguruma, whose tables follow Unicode 16.0 (checked code point by code point with --check), while
the standard library of Python 3.11 ships Unicode 14.0; so the script prefers the `unicodedata2`
backport (pip install unicodedata2==16.0.0) and falls back to the standard module with a warning.

Definitions (those of Oniguruma, which `tokenizers` uses):
  letter     general category L* (Lu Ll Lt Lm Lo)
  number     general category N* (Nd Nl No)
  whitespace U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp (= the White_Space property)
Everything else, unassigned code points included, is "other".

NFC data (Hangul syllables are left to the algorithm):
  ccc            canonical combining class, ranges of equal non-zero class
  decomposition  the full canonical decomposition (NFD of the character), at most 4 code points
  composition    pair -> primary composite: a character whose one-level canonical decomposition is two
                 code points, that starts with a starter and that NFC keeps (so not excluded)
  qc_not_yes     NFC_Quick_Check is No or Maybe: NFC changes the character itself, or it can combine
                 with what precedes it (second of a composition, Hangul medial vowels and final consonants)

Usage: python3 tools/reference/gen_unicode_tables.py [--check]
  --check  also compares every code point with the pre-tokenizer of HuggingFace `tokenizers`.
"""
import os
import sys

try:
    import unicodedata2 as ud
except ImportError:  # pragma: no cover
    import unicodedata as ud
    print(f"warning: unicodedata2 missing; using Python's Unicode {ud.unidata_version}", file=sys.stderr)

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
NAMES = {LETTER: "kLetter", NUMBER: "kNumber", SPACE: "kSpace"}


def char_class(cp):
    if 0xD800 <= cp <= 0xDFFF:
        return OTHER  # surrogates never reach the tables: UTF-8 cannot encode them
    cat = ud.category(chr(cp))
    if cat[0] == "L":
        return LETTER
    if cat[0] == "N":
        return NUMBER
    if cat in ("Zs", "Zl", "Zp") or cp in (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x85):
        return SPACE
    return OTHER


def ranges():
    out = []
    start, cur = 0, char_class(0)
    for cp in range(1, 0x110000):
        c = char_class(cp)
        if c != cur:
            if cur != OTHER:
                out.append((start, cp - 1, cur))
            start, cur = cp, c
    if cur != OTHER:
        out.append((start, 0x10FFFF, cur))
    return out


def nfc_data():
    ccc, decomp, comp, not_yes = {}, {}, {}, set()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if ud.combining(c):
            ccc[cp] = ud.combining(c)
        d = ud.decomposition(c)
        if d and not d.startswith("<"):
            full = [ord(x) for x in ud.normalize("NFD", c)]
            assert len(full) <= 4
            decomp[cp] = full
            parts = [int(x, 16) for x in d.split()]
            if len(parts) == 2 and ud.normalize("NFC", c) == c and not ud.combining(chr(parts[0])):
                comp[(parts[0], parts[1])] = cp
        if ud.normalize("NFC", c) != c:
            not_yes.add(cp)
    for (a, b) in comp:
        not_yes.add(b)
    not_yes |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    return ccc, decomp, comp, not_yes


def range_list(keys, value=lambda cp: None):
    out = []
    for cp in sorted(keys):
        v = value(cp)
        if out and out[-1][1] == cp - 1 and out[-1][2] == v:
            out[-1][1] = cp
        else:
            out.append([cp, cp, v])
    return out


def emit(lines, decl, items, per_row):
    lines.append(decl + " = {")
    for i in range(0, len(items), per_row):
        lines.append("    " + ", ".join(items[i:i + per_row]) + ",")
    lines.append("};")


def check_against_hf():
    from tokenizers import pre_tokenizers

    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    def hf_class(c):
        # A character joins the run of the class of the character before it.
        if len(bl.pre_tokenize_str("a" + c)) == 1:
            return LETTER
        if len(bl.pre_tokenize_str("1" + c)) == 1:
            return NUMBER
        if len(bl.pre_tokenize_str("!" + c)) == 1:
            return OTHER
        return SPACE

    bad = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and hf_class(chr(cp)) != char_class(cp)]
    print(f"code points that differ from HuggingFace tokenizers: {len(bad)}", [hex(b) for b in bad[:20]])
    return not bad


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "src", "tokenizers", "unicode_tables.inc")
    rs = ranges()
    lines = [
        "// Generated by tools/reference/gen_unicode_tables.py; do not edit.",
        f"// Unicode {ud.unidata_version}: {len(rs)} ranges {{first, last, class}} of letters (\\p{{L}}),",
        "// numbers (\\p{N}) and whitespace (\\s), sorted; code points in no range are \"other\".",
        f'static constexpr const char* kUnicodeVersion = "{ud.unidata_version}";',
    ]
    emit(lines, "static constexpr UnicodeRange kUnicodeRanges[]", [f"{{0x{a:X}, 0x{b:X}, {NAMES[c]}}}" for a, b, c in rs], 4)

    ccc, decomp, comp, not_yes = nfc_data()
    cr = range_list(ccc, lambda cp: ccc[cp])
    qr = range_list(not_yes)
    lines.append("")
    lines.append(f"// NFC: {len(cr)} combining-class ranges, {len(decomp)} decompositions, {len(comp)} compositions,")
    lines.append(f"// {len(qr)} quick-check ranges.")
    emit(lines, "static constexpr CccRange kCccRanges[]", [f"{{0x{a:X}, 0x{b:X}, {v}}}" for a, b, v in cr], 4)
    emit(lines, "static constexpr CodeRange kNfcQcNotYes[]", [f"{{0x{a:X}, 0x{b:X}}}" for a, b, _ in qr], 5)
    emit(lines, "static constexpr Decomposition kDecompositions[]",
         [f"{{0x{cp:X}, {{{', '.join(f'0x{x:X}' for x in d + [0] * (4 - len(d)))}}}}}" for cp, d in sorted(decomp.items())], 2)
    emit(lines, "static constexpr Composition kCompositions[]",
         [f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for (a, b), c in sorted(comp.items())], 3)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}: {len(rs)} class ranges, {len(cr)} ccc ranges, {len(decomp)} decompositions, "
          f"{len(comp)} compositions, Unicode {ud.unidata_version}")
    if "--check" in sys.argv[1:]:
        sys.exit(0 if check_against_hf() else 1)


if __name__ == "__main__":
    main()
