#!/usr/bin/env bash
# A launch across machines, on one machine: mpirun with a hostfile naming two "nodes" (nodeA, nodeB;
# 2 slots each), whose daemons OpenMPI starts through a stand-in for ssh that runs the command here.
# mpirun then treats them as two nodes: each has its own daemon, its own local ranks and its own
# MPI_COMM_TYPE_SHARED group, and the ranks talk over TCP on the loopback interface. Checks:
#   1. test_launch's LaunchMpi.* on 4 ranks: the launcher's and MPI's ranks agree, local ranks are per
#      node (0,1 on nodeA; 0,1 on nodeB), two nodes;
#   2. pretrain_difflm dp2 x tp2 on those 4 ranks (each tp pair on one node) against the single process:
#      step 1's loss within 1e-6 relative, every step within 1e-4 (scripts/layout_matrix.sh's bounds).
# Exits 77 (ctest's skip) with a message when mpirun is absent. About 20 s.
#
#   scripts/hostfile_launch_test.sh [--build DIR] [--keep]
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build"
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "hostfile_launch_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v mpirun >/dev/null || { echo "hostfile_launch_test.sh: mpirun not found (install OpenMPI); skipped"; exit 77; }
BIN="$BUILD/bin"
for f in "$BIN/pretrain_difflm" "$BIN/preprocess_data" "$BUILD/tests/test_launch"; do
  [[ -x "$f" ]] || { echo "hostfile_launch_test.sh: build $f first" >&2; exit 2; }
done
WORK="$(mktemp -d /tmp/hostfile_launch.XXXXXX)"
[[ $KEEP == 1 ]] || trap 'rm -rf "$WORK"' EXIT

# OpenMPI starts a remote daemon as `<agent> <host> orted ...`: the stand-in drops its options and the
# host and runs the rest on this machine. Each "node" gets its own session directory base: the daemons
# of one job otherwise both create /tmp/ompi.<host>.<uid>/jf.<job>, and the loser of that race fails
# with "File exists".
cat > "$WORK/fake_ssh" <<'SH'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) host="$1"; shift; break ;; esac; done
OMPI_MCA_orte_tmpdir_base="$(dirname "$0")/tmp.$host"
mkdir -p "$OMPI_MCA_orte_tmpdir_base"
export OMPI_MCA_orte_tmpdir_base
exec /bin/sh -c "$*"
SH
chmod +x "$WORK/fake_ssh"
printf 'nodeA slots=2\nnodeB slots=2\n' > "$WORK/hostfile"

# Two daemons on one machine need: no shared hwloc topology (rtc ^hwloc: the second daemon would map the
# first one's segment and crash), no shared-memory transport (vader's segments are named by host and
# local rank, which both "nodes" share), and TCP over loopback (the only interface every machine has).
MPIRUN=(mpirun --allow-run-as-root --hostfile "$WORK/hostfile" --mca plm_rsh_agent "$WORK/fake_ssh"
        --mca rtc ^hwloc --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
        --bind-to none --map-by ppr:2:node -np 4 -x OMP_NUM_THREADS=1)

echo "== LaunchMpi.* on 2 nodes x 2 ranks"
if ! MEGADLM_TEST_NODES=2 timeout 120 "${MPIRUN[@]}" -x MEGADLM_TEST_NODES "$BUILD/tests/test_launch" \
    --gtest_filter='LaunchMpi.*' --gtest_color=no > "$WORK/ranks.log" 2>&1; then
  cat "$WORK/ranks.log"; echo "FAIL: LaunchMpi.* under the hostfile"; exit 1
fi
grep '^\[launch\]' "$WORK/ranks.log" | sort
if grep -q SKIPPED "$WORK/ranks.log" || [[ $(grep -c '^\[       OK \] LaunchMpi' "$WORK/ranks.log") != 4 ]]; then
  cat "$WORK/ranks.log"; echo "FAIL: LaunchMpi.* did not pass on all 4 ranks"; exit 1
fi

# ---- data: 80 documents of pseudo-random common words, byte tokenizer ---------------------------
RANDOM=7
words=(the of and to in a is that for it as was with be by on not he this are or his from at which)
for ((d = 0; d < 80; ++d)); do
  text=""
  for ((i = 0; i < 150 + d; ++i)); do text+="${words[RANDOM % ${#words[@]}]} "; done
  printf '{"text": "%s"}\n' "$text"
done > "$WORK/corpus.jsonl"
"$BIN/preprocess_data" --input "$WORK/corpus.jsonl" --output-prefix "$WORK/corpus" --tokenizer-type ByteTokenizer \
  --append-eod > "$WORK/preprocess.log" 2>&1 || { cat "$WORK/preprocess.log"; exit 1; }

# layout_matrix.sh's config (4 heads, 2 kv groups: tp 2 divides both), 5 steps. The padded vocabulary
# is a multiple of divisible-by x tp: 256 x 1 and 128 x 2 give both runs the same one.
FLAGS=(--model-type difflm --num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention
       --num-query-groups 2 --ffn-hidden-size 128 --seq-length 32 --max-position-embeddings 32
       --micro-batch-size 2 --global-batch-size 8 --train-iters 5 --lr 1e-3 --lr-warmup-iters 2 --min-lr 1e-4
       --lr-decay-style cosine --weight-decay 0.01 --clip-grad 1.0 --seed 1234
       --data-path "$WORK/corpus_text_document" --split 100,0,0 --tokenizer-type ByteTokenizer
       --log-interval 1 --eval-interval 100000 --eval-iters 0
       --data-cache-path "$WORK/cache")

echo "== pretrain_difflm: one process, then dp2 x tp2 on 2 nodes"
OMP_NUM_THREADS=1 "$BIN/pretrain_difflm" "${FLAGS[@]}" --make-vocab-size-divisible-by 256 --save "$WORK/one" > "$WORK/one.log" 2>&1 ||
  { cat "$WORK/one.log"; echo "FAIL: the single-process run"; exit 1; }
timeout 300 "${MPIRUN[@]}" "$BIN/pretrain_difflm" "${FLAGS[@]}" --make-vocab-size-divisible-by 128 --tensor-model-parallel-size 2 \
  --save "$WORK/nodes" > "$WORK/nodes.log" 2>&1 || { cat "$WORK/nodes.log"; echo "FAIL: the 2-node run"; exit 1; }
grep -E "launch: |parallel layout" "$WORK/nodes.log" || true
grep -q "launch: openmpi: rank 0 of 4, local rank 0 of 2; MPI: rank 0 of 4, local rank 0 of 2 on node 0 of 2" \
  "$WORK/nodes.log" || { cat "$WORK/nodes.log"; echo "FAIL: rank 0 does not log 2 nodes of 2 ranks"; exit 1; }

# The losses of metrics.jsonl, "iteration loss" per line (no JSON parser needed: flat objects).
losses() {
  sed -n 's/.*"iteration": *\([0-9]*\).*"loss": *\([-0-9.eE+]*\).*/\1 \2/p' "$1"
}
losses "$WORK/one/metrics.jsonl" > "$WORK/one.losses"
losses "$WORK/nodes/metrics.jsonl" > "$WORK/nodes.losses"
awk 'NR == FNR { ref[$1] = $2; next }
     { d = $2 - ref[$1]; if (d < 0) d = -d; r = ref[$1]; if (r < 0) r = -r; rel = d / (r > 1e-30 ? r : 1e-30);
       printf "step %d: one process %.7f, 2 nodes %.7f, relative difference %.2e\n", $1, ref[$1], $2, rel;
       if (!($1 in ref) || ($1 == 1 && rel > 1e-6) || rel > 1e-4) bad = 1; n++ }
     END { if (n != 5) { print "expected 5 steps, got " n; bad = 1 } exit bad }' \
  "$WORK/one.losses" "$WORK/nodes.losses" || { echo "FAIL: the 2-node losses differ from the single process"; exit 1; }
echo "hostfile launch: ok"
