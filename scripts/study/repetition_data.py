#!/usr/bin/env python3
"""Data for scripts/study_repetition.sh (standard library only).

  split  CORPUS.jsonl OUTDIR --heldout-docs N --cloze-items M --cloze-max-words W --seed S
      Shuffles the documents (seeded), keeps the first N as held-out text (OUTDIR/heldout.jsonl), the
      rest as the training pool in that shuffled order (OUTDIR/pool.jsonl), and writes a cloze set
      from the held-out documents (OUTDIR/cloze.jsonl, one item per document of 12 to W words): the
      context is the document's first half, the right choice the next four words, the three wrong
      choices the four words at the same place in three other held-out documents.

  budgets POOL_PREFIX POOL.jsonl OUTDIR B1 B2 ...
      Reads the token count of each pool document from the Megatron .idx that preprocess_data wrote
      for POOL.jsonl, and writes OUTDIR/train_<B>.jsonl: the shortest prefix of the pool holding at
      least B tokens (end-of-document tokens counted). Smaller budgets are prefixes of larger ones.
      Prints "<B> <documents> <tokens>" per budget.

  count PREFIX
      Prints the number of tokens of a Megatron dataset.
"""
import array
import json
import random
import struct
import sys


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_index(prefix):
    """(dtype code, token counts per sequence) of a Megatron MMIDIDX index."""
    with open(prefix + ".idx", "rb") as f:
        data = f.read()
    if data[:9] != b"MMIDIDX\x00\x00":
        sys.exit(f"repetition_data.py: {prefix}.idx is not a Megatron index")
    code, count = struct.unpack_from("<BQ", data, 17)
    return code, list(struct.unpack_from(f"<{count}i", data, 34))


def idx_sizes(prefix):
    return read_index(prefix)[1]


def read_tokens(prefix):
    """The token ids of a Megatron dataset (uint16 or int32 .bin)."""
    a = array.array({8: "H", 4: "i"}[read_index(prefix)[0]])
    with open(prefix + ".bin", "rb") as f:
        a.frombytes(f.read())
    return a


def cloze_items(docs, rng, n_items, max_words):
    words = [d["text"].split() for d in docs]
    usable = [i for i, w in enumerate(words) if 12 <= len(w) <= max_words]
    items = []
    for i in usable[:n_items]:
        w = words[i]
        k = len(w) // 2
        others = rng.sample([j for j in usable if j != i], 3)
        wrong = []
        for j in others:
            o = words[j]
            at = min(len(o) // 2, len(o) - 4)
            wrong.append(" " + " ".join(o[at:at + 4]))
        choices = [" " + " ".join(w[k:k + 4])] + wrong
        label = rng.randrange(4)
        choices[0], choices[label] = choices[label], choices[0]
        items.append({"context": " ".join(w[:k]), "choices": choices, "label": label})
    return items


def split(argv):
    corpus, out = argv[0], argv[1]
    opts = dict(zip(argv[2::2], argv[3::2]))
    n_held = int(opts["--heldout-docs"])
    n_cloze = int(opts["--cloze-items"])
    rng = random.Random(int(opts["--seed"]))
    docs = read_jsonl(corpus)
    rng.shuffle(docs)
    held, pool = docs[:n_held], docs[n_held:]
    write_jsonl(f"{out}/heldout.jsonl", held)
    write_jsonl(f"{out}/pool.jsonl", pool)
    items = cloze_items(held, rng, n_cloze, int(opts["--cloze-max-words"]))
    write_jsonl(f"{out}/cloze.jsonl", items)
    print(f"held-out {len(held)} documents, pool {len(pool)} documents, cloze {len(items)} items")


def budgets(argv):
    prefix, pool_jsonl, out = argv[0], argv[1], argv[2]
    sizes = idx_sizes(prefix)
    pool = read_jsonl(pool_jsonl)
    if len(sizes) != len(pool):
        sys.exit(f"repetition_data.py: {prefix}.idx has {len(sizes)} documents, {pool_jsonl} {len(pool)}")
    for b in (int(x) for x in argv[3:]):
        total, n = 0, 0
        while n < len(sizes) and total < b:
            total += sizes[n]
            n += 1
        if total < b:
            sys.exit(f"repetition_data.py: the pool holds {total} tokens, fewer than the budget {b}")
        write_jsonl(f"{out}/train_{b}.jsonl", pool[:n])
        print(b, n, total)


def count(argv):
    print(sum(idx_sizes(argv[0])))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("split", "budgets", "count"):
        sys.exit(__doc__)
    {"split": split, "budgets": budgets, "count": count}[sys.argv[1]](sys.argv[2:])
