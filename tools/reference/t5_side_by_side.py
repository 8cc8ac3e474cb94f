#!/usr/bin/env python3
"""pretrain_difflm --model-type t5 beside an independent PyTorch T5 (docs/t5.md, "Beside PyTorch").

The reference is transformers' T5ForConditionalGeneration (eager attention, no dropout), the same
architecture as our T5Model (pre-norm RMSNorm stacks, unscaled attention with the bucketed relative
position bias of each stack's first layer, the ReLU or gated-GELU feed-forward, the output tied and
scaled by d_model^-0.5 or an lm_head of its own), built from the config.json of our initial weights
exported to HuggingFace (--init-hf: `convert_checkpoint --from-native INIT --to-hf DIR` of a run
with --lr 0 for one step, which leaves the initialisation unchanged).

It reads the samples our run consumed (--samples: `inspect_data --t5-samples`; the encoder tokens
and padding mask, the decoder input and its padding mask, the labels where loss_mask is 1) and
trains as T5Trainer does: per micro-batch the loss is the mean cross-entropy over its labelled
decoder rows (transformers' own loss, ignore index -100), the step's loss the mean over the global
batch's micro-batches; the global gradient norm clipped (clip / (norm + 1e-6)); torch's AdamW with
weight decay on the matrices and the embedding, not on the RMSNorm weights and the relative position
bias tables (as our ParamStore marks them); Megatron's LR schedule (warmup, then linear or cosine
decay to --min-lr). Our run's per-step losses and gradient norms come from its metrics.jsonl
(--ours, run with --log-interval 1).

--dtype float32 float64 trains one reference in each precision on the same samples: ours against the
float32 one sets two float32 implementations of the same run side by side; the float32 one against
the float64 one shows how far float32 rounding alone moves the run. (transformers computes T5's RMSNorm
variance and the attention softmax in float32 even in a float64 model.) Writes a CSV (per step and
reference dtype D: torch_loss_D, rel_loss_D = |ours - torch| / |torch|, the gradient norms likewise,
and with both dtypes rel_loss_float32_float64) and, when matplotlib imports, a PNG of the loss curves
and their relative differences.

Legend: B micro-batch, S encoder length, T decoder length, G global batch, M micro-batches per step.
"""
import os

import torch
import transformers

import side_by_side as sbs


def reference_model(hf_dir, dtype):
    model = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir, attn_implementation="eager",
                                                                    dropout_rate=0.0)
    model.to(dtype)
    model.train(False)  # no dropout; gradients still flow
    return model


def no_decay(name, q):
    """Our AdamW's exemptions: the norms (1-D) and the relative position bias tables."""
    return q.dim() < 2 or "relative_attention_bias" in name


def batch(rows):
    """The micro-batch's tensors: encoder [B, S], decoder [B, T], labels -100 where loss_mask is 0."""
    def t(key):
        return torch.tensor([r[key] for r in rows], dtype=torch.long)
    labels = t("decoder_labels").masked_fill(t("loss_mask") == 0, -100)
    return {"input_ids": t("encoder_tokens"), "attention_mask": t("encoder_padding_mask"),
            "decoder_input_ids": t("decoder_input"), "decoder_attention_mask": t("decoder_padding_mask"),
            "labels": labels}


def difference_label(key):
    """rel_loss_float32 -> ours vs torch float32; rel_loss_float32_float64 -> torch float32 vs float64."""
    dtypes = key[len("rel_loss_"):].split("_")
    return f"ours vs torch {dtypes[0]}" if len(dtypes) == 1 else f"torch {dtypes[0]} vs {dtypes[1]}"


def step_loss(model, samples, step, B, G):
    """Forward and backward of the step's G // B micro-batches; the step's loss (their mean)."""
    M = G // B
    loss = 0.0
    for m in range(M):
        first = (step - 1) * G + m * B
        out = model(**batch(samples[first:first + B]), use_cache=False)
        (out.loss / M).backward()
        loss += out.loss.item() / M
    return loss


def main():
    p = sbs.parser(__doc__)
    p.add_argument("--init-hf", required=True, help="our initial checkpoint exported by convert_checkpoint --to-hf")
    p.add_argument("--samples", required=True, help="inspect_data --t5-samples output of the run's flags")
    p.add_argument("--ours", required=True, help="our run's --save directory (metrics.jsonl, --log-interval 1)")
    p.add_argument("--dtype", nargs="+", default=["float64"], choices=["float32", "float64"],
                   help="the references' precisions, each a model trained alike (the first is plotted)")
    sbs.add_run_flags(p)
    a = p.parse_args()

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    refs = {d: reference_model(a.init_hf, getattr(torch, d)) for d in a.dtype}
    opts = {d: sbs.adamw(model, a, no_decay) for d, model in refs.items()}
    B, G = a.micro_batch_size, a.global_batch_size
    samples = sbs.read_samples(a.samples, a.train_iters * G)
    ours = sbs.our_metrics(a.ours, "lm_loss")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {' and '.join(a.dtype)}; "
          f"{sum(q.numel() for q in refs[a.dtype[0]].parameters())} parameters, {G // B} micro-batches of {B} a step")

    nan = float("nan")
    rows = []
    for step in range(1, a.train_iters + 1):
        o = ours.get(step, {})
        row = {"step": step, "lr": 0.0, "ours_loss": o.get("lm_loss", nan), "ours_grad_norm": o.get("grad_norm", nan)}
        for d, model in refs.items():
            opts[d].zero_grad(set_to_none=False)
            loss = step_loss(model, samples, step, B, G)
            norm, row["lr"] = sbs.update(model, opts[d], step, a)
            row.update({f"torch_loss_{d}": loss, f"rel_loss_{d}": sbs.rel(row["ours_loss"], loss),
                        f"torch_grad_norm_{d}": norm, f"rel_grad_norm_{d}": sbs.rel(row["ours_grad_norm"], norm)})
        if len(refs) == 2:
            row["rel_loss_float32_float64"] = sbs.rel(row["torch_loss_float32"], row["torch_loss_float64"])
        rows.append(row)

    first = a.dtype[0]
    clipped = sum(r[f"torch_grad_norm_{first}"] > a.clip_grad for r in rows) if a.clip_grad > 0 else 0
    print(f"last step: ours {rows[-1]['ours_loss']:.6f}, torch ({first}) {rows[-1][f'torch_loss_{first}']:.6f}; "
          f"the norm above --clip-grad at {clipped} of {len(rows)} steps")
    rel_keys = [k for k in rows[0] if k.startswith("rel_")]
    sbs.report(rows, a, rel_keys,
               [("T5 span-corruption loss", [("ours_loss", sbs.OURS),
                                             (f"torch_loss_{first}", dict(sbs.TORCH, label=f"transformers' T5 ({first})"))],
                 False),
                ("relative difference of the losses", [(k, {"label": difference_label(k), "lw": 1.0})
                                                       for k in rel_keys if k.startswith("rel_loss_")], True)])


if __name__ == "__main__":
    main()
