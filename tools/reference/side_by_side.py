"""What the side-by-side references share (bert_side_by_side.py, t5_side_by_side.py): the flags of the
optimisation and the run, the samples `inspect_data --bert-samples / --t5-samples` wrote, our run's
per-step metrics, Megatron's LR schedule, the trainer's step (global-norm clipping, then torch's AdamW
with weight decay on the parameters our AdamW decays), the CSV and the PNG.
"""
import argparse
import csv
import json
import math
import os
import sys

import torch


def add_run_flags(p):
    """The flags of our run that the reference repeats (the names are pretrain_difflm's)."""
    p.add_argument("--train-iters", type=int, required=True)
    p.add_argument("--micro-batch-size", type=int, required=True)
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--lr-warmup-iters", type=int, default=0)
    p.add_argument("--lr-decay-iters", type=int, default=0)
    p.add_argument("--lr-decay-style", default="linear", choices=["constant", "linear", "cosine"])
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--adam-beta1", type=float, default=0.9)
    p.add_argument("--adam-beta2", type=float, default=0.999)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--csv", required=True)
    p.add_argument("--png", default="")


def checkpoint_dir(path):
    """A run directory (its latest_checkpointed_iteration.txt) or an iter_* directory."""
    latest = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.exists(latest):
        return os.path.join(path, "iter_%07d" % int(open(latest).read().strip()))
    return path


def lr_at(step, a):
    """Megatron's schedule; step counts updates from 1."""
    if a.lr_warmup_iters > 0 and step <= a.lr_warmup_iters:
        return a.lr * step / a.lr_warmup_iters
    if a.lr_decay_style == "constant":
        return a.lr
    decay = a.lr_decay_iters or a.train_iters
    if step > decay:
        return a.min_lr
    ratio = min(max((step - a.lr_warmup_iters) / max(decay - a.lr_warmup_iters, 1), 0.0), 1.0)
    coeff = 1.0 - ratio if a.lr_decay_style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return a.min_lr + coeff * (a.lr - a.min_lr)


def read_samples(path, n):
    """The first n lines of an inspect_data samples file, as dicts."""
    rows = []
    with open(path) as f:
        for line in f:
            rows.append(json.loads(line))
            if len(rows) == n:
                break
    if len(rows) < n:
        sys.exit(f"{path}: {len(rows)} samples, the run needs {n}")
    return rows


def our_metrics(save_dir, key):
    """{iteration: line} of the training lines of our run's metrics.jsonl (those holding `key`)."""
    out = {}
    for line in open(os.path.join(save_dir, "metrics.jsonl")):
        j = json.loads(line)
        if key in j:
            out[j["iteration"]] = j
    return out


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def adamw(model, a, no_decay):
    """torch's AdamW with weight decay on every parameter but those no_decay(name, parameter) picks."""
    named = list(model.named_parameters())
    decay = [q for n, q in named if not no_decay(n, q)]
    rest = [q for n, q in named if no_decay(n, q)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=a.lr, betas=(a.adam_beta1, a.adam_beta2), eps=a.adam_eps)


def update(model, opt, step, a):
    """The trainer's update once the step's gradients are in: the global norm (float64), clipping by
    clip / (norm + 1e-6) above the threshold, the schedule's lr, AdamW. Returns (norm, lr)."""
    norm = torch.sqrt(sum((q.grad.double() ** 2).sum() for q in model.parameters())).item()
    if a.clip_grad > 0 and norm > a.clip_grad:
        for q in model.parameters():
            q.grad.mul_(a.clip_grad / (norm + 1e-6))
    lr = lr_at(step, a)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    return norm, lr


def write_csv(rows, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})


def summarise(rows, key):
    """The relative difference `key` at step 1, its maximum and its last value, printed."""
    worst = max(rows, key=lambda r: r[key])
    print(f"{key}: step 1 {rows[0][key]:.3g}, max {worst[key]:.3g} at step {worst['step']}, last {rows[-1][key]:.3g}")


OURS = {"label": "MegaDLMs C++ (fp32)", "lw": 1.6}
TORCH = {"label": "PyTorch reference", "lw": 1.0, "ls": "--"}


def plot(rows, path, panels):
    """A PNG of one panel per (title, curves, log_scale), each curve (CSV key, line style) against the
    step; nothing (said) when matplotlib does not import."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (the CSV has the curves)")
        return
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for axis, (title, curves, log_scale) in zip(ax[0], panels):
        for key, style in curves:
            axis.plot(steps, [r[key] for r in rows], **style)
        if log_scale:
            axis.set_yscale("log")
        axis.set_title(title)
        axis.set_xlabel("step")
        if any("label" in style for _, style in curves):
            axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def report(rows, a, rel_keys, panels):
    """The CSV (--csv), the summary of each relative difference, the PNG (--png) of `panels`."""
    write_csv(rows, a.csv)
    for key in rel_keys:
        summarise(rows, key)
    if a.png:
        plot(rows, a.png, panels)


def parser(doc):
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
