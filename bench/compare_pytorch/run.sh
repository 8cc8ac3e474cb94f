#!/usr/bin/env bash
# pretrain_difflm against PyTorch (eager, torch.compile) on identical models and batches; prints a table.
# Builds nothing: give the built tree with --build-dir (default build/). See compare.py --help.
#   bench/compare_pytorch/run.sh [--quick] [--configs gpt2-small,llama-small,gpt2-124m] [--precisions fp32,bf16]
#                                [--objectives ar,dlm] [--impls ours,eager,compile] [--build-dir DIR] [--output FILE.md]
set -euo pipefail
exec python3 "$(dirname "$0")/compare.py" "$@"
