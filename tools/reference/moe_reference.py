#!/usr/bin/env python3
"""PyTorch reference for the MoE router losses, written from Megatron-core's formulas:

  scores      softmax(logits) over experts; for the sigmoid score function sigmoid(logits) / sum
  top-k       experts with the largest logits per token; probs = softmax of the k logits (default),
              scores[top-k] (pre-softmax) or sigmoid[top-k] / sum (sigmoid, k > 1)
  aux_loss    coeff * E / (k * N^2) * sum_e count_e * sum_n scores[n, e]         (Switch)
  seq_aux     coeff * mean_b sum_e (count_be * E / (T k)) * mean_t scores[b, t, e]
  z_loss      coeff * mean_n logsumexp(logits_n)^2                               (ST-MoE)

counts are the top-k selections before any capacity dropping. The fixture holds x, the router weight
and, per case, the losses, the routing and the gradients of (aux + z) w.r.t. x and the weight, in
float64. Writes tests/moe/fixtures/moe_reference.json:

  python3 tools/reference/moe_reference.py
"""
import json
import os

import torch

B, T, C, E, K = 2, 6, 8, 4, 2
AUX, Z = 0.1, 0.05


def router_losses(x, w, score, pre_softmax, lb):
    logits = x @ w.t()                        # [N, E]
    N = logits.shape[0]
    _, top = torch.topk(logits, K, dim=1)      # by logit; every score function is monotone in it
    if score == "softmax":
        aux_scores = torch.softmax(logits, dim=1)
        probs = aux_scores.gather(1, top) if pre_softmax else torch.softmax(logits.gather(1, top), dim=1)
    else:
        sig = torch.sigmoid(logits)
        aux_scores = sig / (sig.sum(1, keepdim=True) + 1e-20)
        sel = sig.gather(1, top)
        probs = sel / (sel.sum(1, keepdim=True) + 1e-20) if K > 1 else sel
    routing_map = torch.zeros(N, E, dtype=torch.float64).scatter(1, top, 1.0)
    if lb == "aux_loss":
        counts = routing_map.sum(0)
        aux = AUX * E / (K * N * N) * torch.sum(counts * aux_scores.sum(0))
    else:
        counts = routing_map.view(B, T, E).sum(1)                    # [B, E]
        mean_scores = aux_scores.view(B, T, E).mean(1)               # [B, E]
        aux = AUX * torch.sum(counts * E / (T * K) * mean_scores, dim=1).mean()
    z = Z * torch.mean(torch.logsumexp(logits, dim=1) ** 2)
    return aux, z, top, probs


def main():
    g = torch.Generator().manual_seed(1234)
    x0 = torch.randn(B * T, C, generator=g, dtype=torch.float64)
    w0 = 0.7 * torch.randn(E, C, generator=g, dtype=torch.float64)
    cases = []
    for score, pre in (("softmax", False), ("softmax", True), ("sigmoid", False)):
        for lb in ("aux_loss", "seq_aux_loss"):
            x = x0.clone().requires_grad_(True)
            w = w0.clone().requires_grad_(True)
            aux, z, top, probs = router_losses(x, w, score, pre, lb)
            (aux + z).backward()
            cases.append({
                "score_function": score, "pre_softmax": pre, "load_balancing": lb,
                "aux_loss": aux.item(), "z_loss": z.item(),
                "top": top.flatten().tolist(), "probs": probs.detach().flatten().tolist(),
                "grad_x": x.grad.flatten().tolist(), "grad_w": w.grad.flatten().tolist(),
            })
    out = {"B": B, "T": T, "C": C, "E": E, "topk": K, "aux_loss_coeff": AUX, "z_loss_coeff": Z,
           "x": x0.flatten().tolist(), "router_weight": w0.flatten().tolist(), "cases": cases}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "moe", "fixtures", "moe_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
