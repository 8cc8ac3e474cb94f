"""Tricky strings shared by the tokenizer fixture scripts (gpt2_expected_ids.py, make_hf_fixtures.py,
make_trainer_fixture.py, make_sentencepiece_fixture.py)."""

STRINGS = [
    "",
    "Hello world",
    "Hello  world",
    "  leading spaces",
    "trailing spaces   ",
    "trailing newline\n",
    "\n\n\nnewlines\n\n",
    "tabs\tand\t\ttabs\t",
    "mixed \t\n \r\n whitespace  \n",
    "windows\r\nline\r\n\r\nendings\r\n",
    " ",
    "   ",
    "\n",
    "\t",
    "  \n  ",
    " \n\n word",
    "a\u00a0b non\u2002breaking\u3000ideographic space",
    "I'm you're he's she'd we'll they've can't",
    "HE'S I'M WE'LL THEY'VE DON'T We'Re",
    "'s's'S 'sup 'llama 'd'",
    "don't 'tis rock'n'roll O'Neil's",
    "'",
    "''",
    " 'quoted' \"double\"",
    "123 4567 89.01 1,000,000 3.14159 12345678901",
    "\u0663\u0664\u0665 Arabic-Indic digits, \u216b roman, \u00bd \u00be \u00b2",
    "Hello!!! ... ??? --- *** !!!abc",
    "$100.00 e-mail: a@b.com http://x.org/a?b=c&d=e#f",
    "<|endoftext|> is text here",
    "I \u2764\ufe0f \U0001F980 and \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family \U0001F389\U0001F389\U0001F389",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u4e2d\u6587\u6587\u672c\uff0c\u6807\u70b9\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 a\u0308 e\u0301",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0924\u092e\u093f\u0932\u094d \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "zero\u200bwidth\ufeffbom\u200d",
    "ctrl\x00\x01\x7f\x1b[0m",
    "x\u1c89y new in Unicode 16",
    "'\u017f long s 'S 'T 'Ll 'VE",
    "def f(x):\n    return x**2  # comment\n\n\tpass\n",
    '{"key": [1, 2.5, null], "k2": "v"}',
    "supercalifragilisticexpialidocious " * 3,
    "a" * 3000,
    "supercalifragilistic" * 150,
    "-" * 2000 + "x",
    "1234567890" * 200,
    "  " * 500 + "x",
    "\n" * 300 + "end",
]

# Random strings over the characters that steer the pre-tokenizer regexes (kinds of whitespace,
# apostrophes and contraction letters in both cases, digits of several scripts, combining marks, CJK,
# emoji, case-folding oddities such as U+017F), for differential tests against `tokenizers`.
FUZZ_POOL = (list(" \t\n\r\x0b\x0c\u00a0\u2003\u3000\u0085'\"!?.,;:-_()[]{}<>/\\@#$%^&*+=~`|")
             + list("aAbsStTdDmMlLrReEvV") + list("0123456789\u0663\u00bd\u2167")
             + list("\u00e9\u0301\u0308\u4e2d\u6587\u3042\ud55c\u017f\u0131\u0130\u00df\u212a")
             + ["\U0001F600", "\U0001F468\u200d\U0001F469", "\u200b", "\ufeff", "\x00", "\x7f", "'s", "'S", "'ll",
                "'LL", "'re", "'Ve", "'d", "'m", "'t", "  ", "\r\n", "\n\n", "123456", "hello", " world"])


def fuzz_strings(seed, n, max_len=60):
    import random

    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(0, max_len))) for _ in range(n)]
