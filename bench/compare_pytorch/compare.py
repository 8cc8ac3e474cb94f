#!/usr/bin/env python3
"""Side-by-side training throughput: build/bin/pretrain_difflm against a PyTorch trainer
(torch_trainer.py, eager and torch.compile) on identical models, batches and thread counts.

One run: (1) the fp32 and bf16 GEMM peaks of this machine, measured now with build/bench/bench_kernels
(`gemm --quick`: the best of the GPT-2 124M layer products, 2 threads) and, for reference, with a
torch.mm probe; (2) for each configuration and objective, our trainer in every precision (back to
back), then the PyTorch trainer(s) in every precision, each a child process of this one (peak RSS from
wait4); (3) a Markdown table.

Model FLOPs per token, the same for both (PaLM convention, as pretrain_difflm's MFU):
  6 * (matrix parameters of the layers + V*C of the output layer) + 12 * L * C * T
(the attention scores and values, forward and backward, counted in full even under a causal mask;
embeddings, norms and biases not counted). MFU = model FLOP/s / the GEMM peak of that precision.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CONFIGS = {
    "gpt2-small": dict(style="gpt2", layers=6, hidden=384, heads=6, ffn=1536, seq=256, batch=8),
    "llama-small": dict(style="llama", layers=8, hidden=512, heads=8, ffn=1376, seq=256, batch=8),
    "gpt2-124m": dict(style="gpt2", layers=12, hidden=768, heads=12, ffn=3072, seq=256, batch=4),
}
VOCAB = 50304  # GPT-2's 50257 (+ a mask token for DLM) padded to a multiple of 128


def flops_per_token(c):
    C, F, L, T = c["hidden"], c["ffn"], c["layers"], c["seq"]
    mlp = (3 if c["style"] == "llama" else 2) * C * F
    return 6.0 * (L * (4 * C * C + mlp) + VOCAB * C) + 12.0 * L * C * T


def run_child(cmd, env, log_path):
    """Runs cmd as a child; returns (rc, output text, peak RSS in KiB from wait4)."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    with open(log_path) as f:
        return p.returncode, f.read(), ru.ru_maxrss


def gemm_peaks(build, env, workdir):
    """Best fp32 and bf16 GFLOP/s of bench_kernels' GEMM section."""
    exe = os.path.join(build, "bench", "bench_kernels")
    rc, out, _ = run_child([exe, "gemm", "--quick"], env, os.path.join(workdir, "bench_kernels.log"))
    if rc != 0:
        sys.exit(f"{exe} failed (rc {rc}):\n{out}")
    fp32, bf16 = 0.0, 0.0
    widened = "oneDNN has no bf16 matmul on this CPU" in out
    for line in out.splitlines():
        m = re.match(r".*\s(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
        if m:
            fp32, bf16 = max(fp32, float(m.group(4))), max(bf16, float(m.group(5)))
    if fp32 == 0:
        sys.exit(f"could not parse the GEMM table of {exe}:\n{out}")
    return fp32 * 1e9, bf16 * 1e9, widened


def torch_mm_peaks(threads):
    # Up to 6 products of each dtype, within about 3 s (on a CPU without bf16 arithmetic PyTorch's bf16
    # product runs at well under 1 GFLOP/s: one alone takes a minute at 2048^3, so bf16 probes 512^3).
    code = (
        "import torch,time,json\n"
        f"torch.set_num_threads({threads})\n"
        "r={}\n"
        "for dt in (torch.float32, torch.bfloat16):\n"
        "  n=2048 if dt==torch.float32 else 512\n"
        "  a=torch.randn(n,n).to(dt); b=torch.randn(n,n).to(dt); best=0; t0=time.perf_counter()\n"
        "  for i in range(6):\n"
        "    t=time.perf_counter(); torch.mm(a,b); s=time.perf_counter()-t\n"
        "    best=max(best,2*n**3/s)\n"
        "    if time.perf_counter()-t0>3: break\n"
        "  r[str(dt)]=best\n"
        "print(json.dumps(r))\n"
    )
    try:
        r = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        return r["torch.float32"], r["torch.bfloat16"]
    except Exception:  # informational only
        return 0.0, 0.0


def prepare_data(build, workdir, shared):
    """Brown tokenised with GPT-2's tokenizer, or synthetic token ids when ../shared is absent."""
    prefix = os.path.join(workdir, "brown")
    pre = os.path.join(build, "bin", "preprocess_data")
    if os.path.isfile(os.path.join(shared, "data", "brown.jsonl")):
        if not os.path.isfile(prefix + "_text_document.idx"):
            tok = os.path.join(shared, "tokenizers", "gpt2")
            subprocess.run([pre, "--input", os.path.join(shared, "data", "brown.jsonl"), "--json-keys", "text",
                            "--output-prefix", prefix, "--tokenizer-type", "GPT2BPETokenizer",
                            "--vocab-file", os.path.join(tok, "vocab.json"), "--merge-file", os.path.join(tok, "merges.txt"),
                            "--append-eod", "--workers", "2"], check=True, stdout=subprocess.DEVNULL)
        return prefix + "_text_document", "Brown corpus, GPT-2 tokenizer"
    prefix = os.path.join(workdir, "synthetic")
    if not os.path.isfile(prefix + "_text_document.idx"):
        import random
        rnd = random.Random(1234)
        jsonl = os.path.join(workdir, "synthetic.jsonl")
        with open(jsonl, "w") as f:
            for _ in range(400):
                f.write(json.dumps({"text": " ".join(str(rnd.randrange(50256)) for _ in range(2000))}) + "\n")
        subprocess.run([pre, "--input", jsonl, "--json-keys", "text", "--output-prefix", prefix, "--tokenizer-type",
                        "NullTokenizer", "--vocab-size", "50257", "--append-eod", "--workers", "2"], check=True,
                       stdout=subprocess.DEVNULL)
    return prefix + "_text_document", "synthetic uniform token ids (../shared absent)"


# Precisions of our trainer alone (its forced --bf16 paths), without a PyTorch run of their own.
OURS_ONLY = ("bf16-products", "bf16-storage")


def ours_cmd(build, c, objective, precision, data, iters):
    cmd = [os.path.join(build, "bin", "pretrain_difflm"), "--model-type", "gpt" if objective == "ar" else "difflm",
           "--num-layers", c["layers"], "--hidden-size", c["hidden"], "--num-attention-heads", c["heads"],
           "--ffn-hidden-size", c["ffn"], "--seq-length", c["seq"], "--micro-batch-size", c["batch"],
           "--global-batch-size", c["batch"], "--data-path", data, "--split", "100,0,0", "--train-iters", iters,
           "--log-interval", 1, "--eval-interval", 0, "--eval-iters", 0, "--lr", "3e-4", "--lr-decay-style", "constant",
           "--weight-decay", "0.01", "--clip-grad", "1.0"]
    if c["style"] == "llama":
        cmd += ["--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope", "--disable-bias-linear",
                "--untie-embeddings-and-output-weights"]
    if objective == "dlm":
        cmd += ["--difflm-varilen-prob", "0"]
    if precision == "bf16":
        cmd += ["--bf16"]  # the trainer's own choice of product path for this CPU (it logs which)
    if precision == "bf16-products":
        cmd += ["--bf16", "--bf16-products"]
    if precision == "bf16-storage":
        cmd += ["--bf16", "--bf16-storage-only"]
    return [str(x) for x in cmd]


def run_ours(args, c, objective, precision, data, env, log):
    cmd = ours_cmd(args.build_dir, c, objective, precision, data, args.warmup + args.steps)
    rc, out, rss = run_child(cmd, env, log)
    if rc != 0:
        if precision != "fp32" and re.search(r"--bf16.*not available|unknown flag.*bf16", out):
            return {"na": "n/a (not yet)"}
        return {"na": f"failed (rc {rc}, see {log})"}
    steps = [float(m.group(1)) for m in re.finditer(r"\| step time ([\d.]+) ms", out)]
    timed = steps[args.warmup:]
    if not timed:
        return {"na": f"no step times in {log}"}
    step_s = sum(timed) / len(timed) / 1000.0
    r = {"tokens_per_s": c["batch"] * c["seq"] / step_s, "rss_kib": rss}
    # Which products a bf16 run multiplied (the trainer's "parallel layout" line names the path): with
    # bf16 storage only they are fp32 products, so its MFU is taken against the fp32 peak.
    if re.search(r"bf16 \(bf16 storage", out):
        r["fp32_products"] = True
    # The trainer's own count of activation memory (arena + transient arena high-water, first step).
    m = re.search(r"activations high-water ([\d.]+) (KiB|MiB|GiB)", out)
    if m:
        r["act_mib"] = float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]
    return r


def run_torch(args, c, objective, precision, mode, data, env, log):
    cfg = dict(style=c["style"], layers=c["layers"], hidden=c["hidden"], heads=c["heads"], ffn=c["ffn"], vocab=VOCAB,
               vocab_real=50257)
    warm = args.warmup + (1 if mode == "compile" else 0)  # the first step compiles; one more to settle
    cmd = [sys.executable, os.path.join(HERE, "torch_trainer.py"), "--config", json.dumps(cfg), "--objective", objective,
           "--precision", precision, "--mode", mode, "--seq-length", str(c["seq"]), "--micro-batch-size", str(c["batch"]),
           "--data", data, "--warmup", str(warm), "--steps", str(args.steps), "--threads", str(args.threads)]
    if args.torch_masked_logits:
        cmd.append("--masked-logits")
    rc, out, rss = run_child(cmd, env, log)
    m = re.search(r"^RESULT (.*)$", out, re.M)
    if rc != 0 or not m:
        return {"na": f"failed (rc {rc}, see {log})"}
    r = json.loads(m.group(1))
    r["rss_kib"] = rss
    return r


def main():
    ap = argparse.ArgumentParser(description="pretrain_difflm against PyTorch (eager, torch.compile), side by side")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"), help="built tree (bin/, bench/); default build/")
    ap.add_argument("--quick", action="store_true", help="1 warm-up and 2 timed steps, eager PyTorch only")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma list of " + ", ".join(CONFIGS))
    ap.add_argument("--objectives", default="ar,dlm", help="comma list of ar, dlm")
    ap.add_argument("--precisions", default="fp32",
                    help="comma list of fp32, bf16 (ours: --bf16, whose product path the trainer picks for the CPU), "
                         "bf16-products (ours only: --bf16 --bf16-products, bf16 products even where they are slow), "
                         "bf16-storage (ours only: --bf16 --bf16-storage-only, fp32 products with bf16 storage)")
    ap.add_argument("--torch-precisions", default="",
                    help="the PyTorch runs' precisions (default: those of --precisions but the ours-only ones); e.g. fp32 "
                         "where PyTorch's bf16 has no fast path (on an AVX2 CPU its autocast bf16 runs ~40x slower)")
    ap.add_argument("--impls", default="ours,eager,compile", help="comma list of ours, eager, compile")
    # Two: every trainer's second step still first-touches memory (our activation arenas grow to fit
    # after the first step, PyTorch's caching allocator fills), which is start-up, not steady state.
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps (torch.compile gets one more)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run each configuration's trainers this many times, interleaved (ours, eager, compile, ours, "
                         "...), and take each one's median tokens/s: on a machine whose speed drifts by several "
                         "per cent over minutes, the ratios then compare runs made close together")
    ap.add_argument("--threads", type=int, default=2, help="threads of every trainer (OMP_NUM_THREADS)")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"), help="../shared (Brown, GPT-2 tokenizer)")
    ap.add_argument("--torch-masked-logits", action="store_true",
                    help="DLM: PyTorch runs its output layer on the masked rows only, as ours does (default: all rows)")
    ap.add_argument("--output", default="", help="also write the table (with the machine) to this Markdown file")
    args = ap.parse_args()
    if args.quick:
        args.warmup, args.steps = 1, 2
        if "--impls" not in sys.argv:
            args.impls = "ours,eager"
    args.build_dir = os.path.abspath(args.build_dir)
    configs = args.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"--configs: unknown configuration '{c}' (expected {', '.join(CONFIGS)})")
    impls = args.impls.split(",")
    if args.rounds < 1:
        sys.exit(f"--rounds: expected a positive number of rounds, got {args.rounds}")
    torch_precisions = ([p for p in args.torch_precisions.split(",") if p] if args.torch_precisions else
                        [p for p in args.precisions.split(",") if p not in OURS_ONLY])

    workdir = os.path.join(args.build_dir, "compare_pytorch")
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TORCHINDUCTOR_COMPILE_THREADS="1")
    load_before = os.getloadavg()
    t_start = time.time()
    data, data_desc = prepare_data(args.build_dir, workdir, args.shared)
    fp32_peak, bf16_peak, bf16_widened = gemm_peaks(args.build_dir, env, workdir)
    peak = {"fp32": fp32_peak, "bf16": bf16_peak, "bf16-products": bf16_peak, "bf16-storage": fp32_peak,
            "widened": bf16_widened}
    tpeak = dict(zip(("fp32", "bf16"), torch_mm_peaks(args.threads)))
    print(f"GEMM peak (bench_kernels gemm --quick, best shape, {args.threads} threads): fp32 {peak['fp32']/1e9:.1f} GFLOP/s, "
          f"bf16 {peak['bf16']/1e9:.1f} GFLOP/s; torch.mm probe (fp32 2048^3, bf16 512^3): fp32 {tpeak['fp32']/1e9:.1f}, "
          f"bf16 {tpeak['bf16']/1e9:.1f} GFLOP/s", flush=True)

    rows = []
    results = {}  # (config, objective, precision, impl) -> result with "mfu"
    for name in configs:
        c = CONFIGS[name]
        fpt = flops_per_token(c)
        for objective in args.objectives.split(","):
            precisions = args.precisions.split(",")
            # Our trainer's runs of every precision first, back to back: the bf16 goal compares them, and
            # the machine's speed drifts by a few percent over the minutes PyTorch's runs take.
            order = [(p, "ours") for p in precisions if "ours" in impls]
            # bf16-products and bf16-storage are ours only: PyTorch's bf16 rows are the peers of every bf16 row.
            order += [(p, impl) for p in torch_precisions for impl in impls if impl != "ours"]
            tries = {}  # (precision, impl) -> the results of every round
            for rnd in range(args.rounds):
                for precision, impl in order:
                    if any("na" in r for r in tries.get((precision, impl), [])):
                        continue  # failed or refused once: not run again
                    nth = rnd + 1 if args.rounds > 1 else None  # which round, when there are several
                    log = os.path.join(workdir, f"{name}-{objective}-{precision}-{impl}" +
                                       (f"-round{nth}" if nth else "") + ".log")
                    if impl == "ours":
                        r = run_ours(args, c, objective, precision, data, env, log)
                    else:
                        r = run_torch(args, c, objective, precision, impl, data, env, log)
                    tries.setdefault((precision, impl), []).append(r)
                    print(f"  {name} {objective} {precision} {impl}" + (f" round {nth}" if nth else "") + ": " +
                          (r["na"] if "na" in r else f"{r['tokens_per_s']:.0f} tokens/s, peak RSS {r['rss_kib']/1048576:.2f} GiB"),
                          flush=True)
            runs = {key: median_result(rs) for key, rs in tries.items()}  # (precision, impl) -> result
            for precision in precisions:
                peer = "bf16" if precision in OURS_ONLY else precision
                res = {impl: runs.get((precision, impl), runs.get((peer, impl))) for impl in impls}
                for impl in impls if precision not in OURS_ONLY else ["ours"]:
                    r = res[impl]
                    if r is None:
                        continue
                    results[(name, objective, precision, impl)] = r
                    label = precision + (" (fp32 products)" if r.get("fp32_products") and precision == "bf16" else "")
                    row = [name, objective.upper(), label, impl]
                    if "na" in r:
                        rows.append(row + [r["na"], "", "", "", "", "", ""])
                        continue
                    row_peak = peak["fp32"] if r.get("fp32_products") else peak[precision]
                    r["mfu"] = r["tokens_per_s"] * fpt / row_peak
                    fl = r["tokens_per_s"] * fpt
                    ratio = lambda other: (f"{r['tokens_per_s'] / res[other]['tokens_per_s']:.2f}x"
                                           if impl == "ours" and res.get(other) and "na" not in res[other] else "")
                    rows.append(row + [f"{r['tokens_per_s']:.0f}", f"{fl/1e12:.3f}", f"{100*fl/row_peak:.1f}%",
                                       f"{r['rss_kib']/1048576:.2f}", f"{r['act_mib']:.0f}" if "act_mib" in r else "",
                                       ratio("eager"), ratio("compile")])
                write_report(args, rows, peak, tpeak, data_desc, load_before, t_start, final=False,
                             goals=goal_lines(results), rounds=round_lines(results))

    write_report(args, rows, peak, tpeak, data_desc, load_before, t_start, final=True, goals=goal_lines(results),
                 rounds=round_lines(results))


def median_result(rs):
    """One trainer's rounds as one result: the median round by tokens/s (the lower middle one of an even
    count), with the highest peak RSS of all rounds and every round's tokens/s; a failure if any failed."""
    failed = [r for r in rs if "na" in r]
    if failed:
        return failed[0]
    ordered = sorted(rs, key=lambda r: r["tokens_per_s"])
    r = dict(ordered[(len(ordered) - 1) // 2])
    r["rss_kib"] = max(x["rss_kib"] for x in rs)
    r["rounds"] = [x["tokens_per_s"] for x in rs]
    return r


def round_lines(results):
    """Every round's tokens/s of each row, in the order they ran (only with --rounds > 1)."""
    return [f"- {name} {obj.upper()} {prec} {impl}: " + ", ".join(f"{t:.0f}" for t in r["rounds"])
            for (name, obj, prec, impl), r in results.items() if len(r.get("rounds", [])) > 1]


def goal_lines(results):
    """The goals this benchmark checks (the thresholds below), row by row from this run's results."""
    ok = lambda b: "met" if b else "NOT met"
    lines = []
    for (name, obj, prec, impl), r in sorted(results.items()):
        if impl != "ours" or "na" in r:
            continue
        what = f"{name} {obj.upper()} {prec}"
        for other, goal in (("eager", 1.5), ("compile", 1.2)):
            o = results.get((name, obj, prec, other))
            if prec == "fp32" and o and "na" not in o:
                x = r["tokens_per_s"] / o["tokens_per_s"]
                lines.append(f"- {what}: ours/{other} {x:.2f}x (goal >= {goal}x: {ok(x >= goal)})")
            peer = ""
            if not o or "na" in o:  # no PyTorch run of this precision: its fp32 run is the memory peer
                o, peer = results.get((name, obj, "fp32", other)), " fp32"
            if o and "na" not in o:
                lines.append(f"- {what}: peak RSS ours {r['rss_kib']/1048576:.2f} GiB vs {other}{peer} "
                             f"{o['rss_kib']/1048576:.2f} GiB ({ok(r['rss_kib'] <= o['rss_kib'])})")
        if prec == "fp32" and name == "gpt2-124m":
            lines.append(f"- {what}: MFU {100*r['mfu']:.1f}% of the fp32 GEMM peak (goal >= 60%: {ok(r['mfu'] >= 0.6)})")
        base = results.get((name, obj, "fp32", "ours"))
        if prec.startswith("bf16") and base and "na" not in base:
            f = r["mfu"] / base["mfu"]
            against = "the fp32 peak: its products are fp32" if r.get("fp32_products") else "the bf16 peak"
            lines.append(f"- {what}: bf16 MFU / fp32 MFU (the bf16 run against {against}) {100*f:.0f}% "
                         f"(goal >= 90%: {ok(f >= 0.9)})")
            if "act_mib" in r and "act_mib" in base:
                a = r["act_mib"] / base["act_mib"]
                lines.append(f"- {what}: activations {r['act_mib']:.0f} MiB = {100*a:.0f}% of fp32's {base['act_mib']:.0f} MiB "
                             f"(goal <= 60%: {ok(a <= 0.6)})")
    return lines


def write_report(args, rows, peak, tpeak, data_desc, load_before, t_start, final, goals=(), rounds=()):
    """The table and the run's conditions; printed at the end, and written to --output after every
    group of rows so that an interrupted run keeps what it measured."""
    header = ["config", "objective", "precision", "impl", "tokens/s", "model TFLOP/s", "MFU", "peak RSS GiB",
              "activations MiB", "ours/eager", "ours/compile"]
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    load_now = os.getloadavg()
    import torch  # only for its version string
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                if l.startswith("Model name")), platform.processor())
    notes = [
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))}, {time.time() - t_start:.0f} s "
        + ("in all" if final else "so far (run still in progress or interrupted)"),
        f"- machine: {cpu}, {os.cpu_count()} cores, {args.threads} threads per trainer; torch {torch.__version__}",
        f"- load average (1 min) at the start / now: {load_before[0]:.2f} / {load_now[0]:.2f}",
        f"- data: {data_desc}; {args.warmup} warm-up step(s) (torch.compile: {args.warmup + 1}), then {args.steps} timed steps"
        + (f"; {args.rounds} interleaved rounds, each trainer's median round shown (peak RSS: the highest round)"
           if args.rounds > 1 else ""),
        f"- GEMM peak measured in this run (bench_kernels gemm --quick, best shape): fp32 {peak['fp32']/1e9:.1f} GFLOP/s, "
        f"bf16 {peak['bf16']/1e9:.1f} GFLOP/s" + (" (no oneDNN bf16 matmul on this CPU: gemm_bf16 widens its inputs to fp32)"
                                                  if peak["widened"] else "")
        + f" (torch.mm probe, fp32 2048^3 and bf16 512^3: fp32 {tpeak['fp32']/1e9:.1f}, bf16 {tpeak['bf16']/1e9:.1f})",
        "- a bf16 row marked (fp32 products) ran --bf16 with fp32 products and bf16 storage (the trainer's choice on a "
        "CPU whose bf16 matmul is missing or not 1.2x its fp32 rate); its MFU is against the fp32 peak",
        "- model FLOPs/token = 6 * (layer matrix params + V*C output layer) + 12 * L * C * T (attention counted in full)",
    ]
    text = "\n".join(table) + "\n\n" + "\n".join(notes) + "\n"
    if rounds:
        text += "\nTokens/s of each round:\n\n" + "\n".join(rounds) + "\n"
    if goals:
        text += "\nIssue 9's goals in this run:\n\n" + "\n".join(goals) + "\n"
    if final:
        print("\n" + text)
    if args.output:
        with open(args.output, "w") as f:
            f.write("# pretrain_difflm against PyTorch (bench/compare_pytorch)\n\n")
            f.write("Command: `bench/compare_pytorch/run.sh " + " ".join(sys.argv[1:]) + "`\n\n" + text)


if __name__ == "__main__":
    main()
