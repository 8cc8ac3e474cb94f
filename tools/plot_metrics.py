#!/usr/bin/env python3
"""Plots training and validation loss from pretrain_difflm's metrics.jsonl files into one PNG.

    plot_metrics.py --run "label=path/metrics.jsonl" [--run ...] --output out.png [--title T]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    train, val = [], []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j:
                train.append((j["iteration"], j["loss"]))
            if "val_loss" in j:
                val.append((j["iteration"], j["val_loss"]))
    return train, val


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="append", required=True, help="label=metrics.jsonl")
    ap.add_argument("--output", required=True)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for spec in a.run:
        label, path = spec.split("=", 1)
        train, val = read(path)
        if train:
            axes[0].plot(*zip(*train), label=label)
        if val:
            axes[1].plot(*zip(*val), marker="o", label=label)
    axes[0].set_title("training loss")
    axes[1].set_title("validation loss (difflm: negative ELBO bound per token)")
    for ax in axes:
        ax.set_xlabel("iteration")
        ax.set_ylabel("nats / token")
        ax.grid(alpha=0.3)
        ax.legend()
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print("wrote", a.output)


if __name__ == "__main__":
    main()
