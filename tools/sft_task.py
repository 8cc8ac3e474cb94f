#!/usr/bin/env python3
"""Fine-tuning tasks for a small model: write a word in capitals, reverse it, or add two numbers.

Writes the training conversations (messages form, one JSON object per line, for
`preprocess_data --chat-template ...`) and the held-out prompts with their answers (for
scripts/sft_demo.sh, which generates answers and counts the exact matches). Training and held-out
items never share a question. Deterministic for a given --seed.

  python3 tools/sft_task.py --task upper --train 4000 --heldout 200 --out runs/sft/upper
    -> runs/sft/upper_train.jsonl, runs/sft/upper_heldout.jsonl
"""
import argparse
import json
import random
import string


LETTERS = (3, 6)  # the words' lengths, least and most (--letters)


def random_word(rng):
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(*LETTERS)))


def upper_item(rng):
    word = random_word(rng)
    return f"Write {word} in capitals.", word.upper()


def reverse_item(rng):
    word = random_word(rng)
    return f"Reverse the word {word}.", word[::-1]


def add_item(rng):
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return f"What is {a} + {b}?", str(a + b)


TASKS = {"upper": upper_item, "reverse": reverse_item, "add": add_item}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), default="upper")
    ap.add_argument("--train", type=int, default=4000, help="training conversations")
    ap.add_argument("--heldout", type=int, default=200, help="held-out prompts")
    ap.add_argument("--letters", default="3-6", help="the words' lengths, as MIN-MAX or N (upper, reverse)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True, help="output prefix")
    args = ap.parse_args()

    global LETTERS
    lo, _, hi = args.letters.partition("-")
    LETTERS = (int(lo), int(hi or lo))
    if not 1 <= LETTERS[0] <= LETTERS[1]:
        ap.error(f"--letters {args.letters}: want MIN-MAX with 1 <= MIN <= MAX")
    rng = random.Random(args.seed)
    make = TASKS[args.task]
    seen, heldout = set(), []
    while len(heldout) < args.heldout:
        q, a = make(rng)
        if q not in seen:
            seen.add(q)
            heldout.append((q, a))
    train = []
    while len(train) < args.train:
        q, a = make(rng)
        if q not in seen:
            train.append((q, a))
    with open(f"{args.out}_train.jsonl", "w") as f:
        for q, a in train:
            f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                             {"role": "assistant", "content": a}]}) + "\n")
    with open(f"{args.out}_heldout.jsonl", "w") as f:
        for q, a in heldout:
            f.write(json.dumps({"prompt": q, "answer": a}) + "\n")
    print(f"sft_task: {len(train)} training conversations, {len(heldout)} held-out prompts -> {args.out}_*.jsonl")


if __name__ == "__main__":
    main()
