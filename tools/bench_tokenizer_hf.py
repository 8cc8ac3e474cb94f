#!/usr/bin/env python3
"""HuggingFace `tokenizers` GPT-2 encode throughput, the other half of bench/run_tokenizer_bench.sh.

The tokenizer is ByteLevelBPETokenizer built from vocab.json + merges.txt (GPT-2's byte-level BPE,
add_prefix_space False). Each pass builds a fresh tokenizer (empty caches, as bench_tokenizer's "cold"
rows) and runs encode_batch over all documents; the best of --repeats passes is reported.
Thread count is the environment's: run single-threaded with RAYON_NUM_THREADS=1
TOKENIZERS_PARALLELISM=false (encode_batch then runs sequentially), batched with the defaults.

Prints "RESULT <name> <threads> <seconds> <tokens> <bytes>".
"""
import argparse
import json
import os
import time

from tokenizers import ByteLevelBPETokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", default="../shared/data/brown.jsonl")
    ap.add_argument("--key", default="text")
    ap.add_argument("--vocab-file", default="../shared/tokenizers/gpt2/vocab.json")
    ap.add_argument("--merge-file", default="../shared/tokenizers/gpt2/merges.txt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default="hf")
    args = ap.parse_args()
    docs = [json.loads(l)[args.key] for l in open(args.input, encoding="utf-8") if l.strip()]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    parallel = os.environ.get("TOKENIZERS_PARALLELISM", "true").lower() not in ("0", "false", "no", "off")
    threads = int(os.environ.get("RAYON_NUM_THREADS", "0")) or os.cpu_count()
    if not parallel:
        threads = 1
    best, tokens = float("inf"), 0
    for _ in range(args.repeats):
        tok = ByteLevelBPETokenizer(args.vocab_file, args.merge_file)
        t0 = time.perf_counter()
        encs = tok.encode_batch(docs)
        best = min(best, time.perf_counter() - t0)
        tokens = sum(len(e.ids) for e in encs)
    print(f"{args.name:<10} {threads:>8} {best:10.4f} {tokens:12d} {tokens / best / 1e6:10.3f} {nbytes / best / 1e6:10.2f}")
    print(f"RESULT {args.name} {threads} {best:.6f} {tokens} {nbytes}")


if __name__ == "__main__":
    main()
