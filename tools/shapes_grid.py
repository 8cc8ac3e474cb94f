#!/usr/bin/env python3
"""A grid of held-out shapes pictures with each backbone's answer under it (docs/llava.md).

    python3 tools/shapes_grid.py WORK OUT.png [--count 16] [--columns 4]

WORK is scripts/llava_shapes.sh's directory: shapes/test.jsonl (the truth, in order), and
<backbone>.answers.jsonl for each backbone that ran (gpt, difflm), one line per picture in the same
order. Each cell shows the picture (scaled up), the truth, and each answer cut at <|im_end|> or a line
break, in green when its colour, shape and count are the truth's and in red otherwise.
"""
import argparse
import json
import os
import re
import sys

from PIL import Image, ImageDraw, ImageFont

WORDS = {
    "colour": ["red", "green", "blue", "yellow", "purple", "orange"],
    "shape": ["circle", "square", "triangle"],
    "count": ["one", "two", "three"],
}


def reading(text):
    """The colour, shape and count words an answer names (the first of each), as score_shapes reads them."""
    words = re.findall(r"[a-z]+", text.lower())
    out = {}
    for key, names in WORDS.items():
        for w in words:
            base = w[:-1] if key == "shape" and w.endswith("s") else w
            if base in names:
                out[key] = base
                break
    return out


def answer_text(line):
    text = line["generation"]
    for end in ("<|im_end|>", "\n"):
        if end in text:
            text = text[: text.index(end)]
    return text.strip()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work")
    p.add_argument("output")
    p.add_argument("--count", type=int, default=16)
    p.add_argument("--columns", type=int, default=4)
    a = p.parse_args()
    with open(os.path.join(a.work, "shapes", "test.jsonl")) as f:
        truth = [json.loads(line) for line in f][: a.count]
    backbones = []
    for name in ("gpt", "difflm"):
        path = os.path.join(a.work, f"{name}.answers.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                answers = [json.loads(line) for line in f]
            if len(answers) < len(truth):
                sys.exit(f"{path}: {len(answers)} answers for {len(truth)} pictures")
            backbones.append((name, answers))
    if not backbones:
        sys.exit(f"{a.work}: no gpt.answers.jsonl or difflm.answers.jsonl")

    side, pad, line_h = 160, 8, 16
    font = ImageFont.load_default()
    text_h = line_h * (1 + len(backbones))
    rows = (len(truth) + a.columns - 1) // a.columns
    cell_w, cell_h = side + 2 * pad, side + text_h + 2 * pad
    grid = Image.new("RGB", (a.columns * cell_w, rows * cell_h), "white")
    draw = ImageDraw.Draw(grid)
    for k, t in enumerate(truth):
        x0, y0 = (k % a.columns) * cell_w + pad, (k // a.columns) * cell_h + pad
        picture = Image.open(os.path.join(a.work, "shapes", t["image"])).convert("RGB")
        grid.paste(picture.resize((side, side), Image.NEAREST), (x0, y0))
        y = y0 + side + 2
        draw.text((x0, y), "truth: " + t["caption"], fill="black", font=font)
        want = {"colour": t["colour"], "shape": t["shape"], "count": WORDS["count"][t["count"] - 1]}
        for name, answers in backbones:
            y += line_h
            text = answer_text(answers[k])
            right = reading(text) == want
            draw.text((x0, y), f"{name}: {text}", fill=(0, 128, 0) if right else (200, 0, 0), font=font)
    grid.save(a.output)
    print(f"{a.output}: {len(truth)} pictures, {', '.join(n for n, _ in backbones)}")


if __name__ == "__main__":
    main()
