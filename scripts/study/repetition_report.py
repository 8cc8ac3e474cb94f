#!/usr/bin/env python3
"""Tables and plot data for scripts/study_repetition.sh (standard library only).

  repetition_report.py OUTDIR
      OUTDIR/budgets.txt holds "<budget> <documents> <tokens>" lines; OUTDIR/<family>_<budget>/ holds
      a run (metrics.jsonl, eval_lik.json and eval_mc.json from evaluate, seconds). Writes OUTDIR/curves_<family>_<budget>.dat
      ("epochs tokens val_loss"), OUTDIR/summary.dat (one line per budget for the plot against unique
      tokens) and OUTDIR/results.md (the table), and prints the table. For reference the table also
      gives what a unigram model of each budget's tokens (add-1/2 smoothing) scores on the held-out text.
"""
import json
import math
import os
import sys
from collections import Counter

from repetition_data import read_tokens

FAMILIES = ("gpt", "difflm")
NAMES = {"gpt": "AR", "difflm": "diffusion"}


def curve(run_dir):
    """(iteration, val_loss) of each validation, and tokens per iteration."""
    points, tokens_per_iter = [], None
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            if "val_loss" in m:
                points.append((m["iteration"], m["val_loss"]))
            elif "consumed_tokens" in m and m.get("iteration", 0) > 0 and tokens_per_iter is None:
                tokens_per_iter = m["consumed_tokens"] / m["iteration"]
    return points, tokens_per_iter


def unigram_cross_entropy(train, held, vocab):
    c, n = Counter(train), len(train)
    return -sum(math.log((c[t] + 0.5) / (n + 0.5 * vocab)) for t in held) / len(held)


def main(out):
    budgets = []
    with open(os.path.join(out, "budgets.txt"), encoding="utf-8") as f:
        for line in f:
            b, docs, tokens = line.split()
            budgets.append((int(b), int(docs), int(tokens)))
    with open(os.path.join(out, "data", "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab = len(tok["model"]["vocab"]) + sum(1 for t in tok.get("added_tokens", []) if t["content"] not in tok["model"]["vocab"])
    held = read_tokens(os.path.join(out, "data", "heldout_text_document"))
    summary = []
    for b, docs, unique in budgets:
        s = {"budget": b, "unique": unique,
             "unigram": unigram_cross_entropy(read_tokens(os.path.join(out, "data", f"train_{b}_text_document")), held, vocab)}
        for fam in FAMILIES:
            run = os.path.join(out, f"{fam}_{b}")
            points, tpi = curve(run)
            trained = [(it, loss) for it, loss in points if it > 0]
            with open(os.path.join(out, f"curves_{fam}_{b}.dat"), "w", encoding="utf-8") as f:
                for it, loss in trained:
                    f.write(f"{it * tpi / unique:.4f} {it * tpi:.0f} {loss:.5f}\n")
            best_it, best = min(trained, key=lambda p: p[1])
            with open(os.path.join(run, "eval_lik.json"), encoding="utf-8") as f:
                d = json.load(f)["dataset"]
            with open(os.path.join(run, "eval_mc.json"), encoding="utf-8") as f:
                mc = json.load(f)["multiple_choice"]
            if fam == "gpt":
                final, se = d["nll_per_token"], d["nll_se"]
            else:
                final, se = d["nelbo_per_token"], d["nelbo_se"]
            with open(os.path.join(run, "seconds"), encoding="utf-8") as f:
                seconds = float(f.read())
            s[fam] = {"final": final, "se": se, "best": best, "best_epoch": best_it * tpi / unique,
                      "curve": trained, "epochs_per_iter": tpi / unique, "acc": mc["accuracy"],
                      "acc_norm": mc["accuracy_per_token"], "items": mc["items"], "seconds": seconds,
                      "epochs": trained[-1][0] * tpi / unique, "mc": d.get("mc_samples")}
        summary.append(s)
    with open(os.path.join(out, "summary.dat"), "w", encoding="utf-8") as f:
        f.write("# unique_tokens ar_final ar_se ar_best dlm_final dlm_se dlm_best\n")
        for s in summary:
            a, d = s["gpt"], s["difflm"]
            f.write(f"{s['unique']} {a['final']:.5f} {a['se']:.5f} {a['best']:.5f} "
                    f"{d['final']:.5f} {d['se']:.5f} {d['best']:.5f}\n")
    lines = [
        "| unique tokens | epochs | family | held-out loss at the end (nats/token, ± s.e.) | best validation loss "
        "(at epoch) | cloze accuracy (per-token) | run time |",
        "|---:|---:|---|---|---|---|---:|",
    ]
    for s in summary:
        for fam in FAMILIES:
            r = s[fam]
            kind = "exact NLL" if fam == "gpt" else f"-ELBO, {r['mc']} MC"
            lines.append(
                f"| {s['unique']:,} | {r['epochs']:.1f} | {NAMES[fam]} | {r['final']:.3f} ± {r['se']:.3f} ({kind}) | "
                f"{r['best']:.3f} ({r['best_epoch']:.1f}) | {100 * r['acc']:.1f}% ({100 * r['acc_norm']:.1f}%) "
                f"of {r['items']} | {r['seconds'] / 60:.1f} min |")
    lines.append("")
    for s in summary:
        a, d = s["gpt"], s["difflm"]
        diff = d["final"] - a["final"]
        err = (a["se"] ** 2 + d["se"] ** 2) ** 0.5
        verdict = "diffusion below AR" if diff + 2 * err < 0 else (
            "AR below diffusion" if diff - 2 * err > 0 else "within two standard errors")
        # The crossing: the first validation from which diffusion stays below AR to the end (both runs
        # validate at the same iterations).
        ar = dict(a["curve"])
        cross = None
        for it, loss in reversed(d["curve"]):
            if loss >= ar[it]:
                break
            cross = it * d["epochs_per_iter"]
        where = f"diffusion's validation loss below AR's from epoch {cross:.1f} to the end" if cross is not None \
            else "diffusion's validation loss above AR's at the end"
        lines.append(f"- {s['unique']:,} unique tokens: end of training, diffusion minus AR = {diff:+.3f} "
                     f"± {err:.3f} nats/token ({verdict}); {where}; a unigram model of these tokens scores "
                     f"{s['unigram']:.3f}.")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
