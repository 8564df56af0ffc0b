#!/usr/bin/env bash
# vLLM cell A/B trials on 2 cores, alternating unchanged (A/A) and +15 % (vspin15: the vLLM decode spins 15 % of each
# engine step on the host, a commit on top of A in a second worktree). Usage, from the repository root:
#   git worktree add /work/geval12/vspin15 HEAD   # then apply the vspin15 commit there (see README.md)
#   bash benchmarks/data/vllm-ab-20261206/run.sh /work/geval12/vspin15 N benchmarks/data/vllm-ab-20261206/SERIES
set -u
SPIN=$1; N=${2:-4}; OUT=$3
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
  for kind in aa spin15; do
    b=.; [ "$kind" = spin15 ] && b=$SPIN
    t0=$(date +%s.%N)
    perfsuite ab --a . --b "$b" --backend vllm --budget 180s --json "$OUT/$kind-$i.json" > "$OUT/$kind-$i.txt" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    echo "{\"trial\": \"$kind-$i\", \"rc\": $rc, \"wall_s\": $(echo "$t1 - $t0" | bc), \"started\": \"$(date -u -d @${t0%.*} +%FT%TZ)\"}" >> "$OUT/trials.jsonl"
    find /tmp -maxdepth 1 -name 'vllm_dist_*' -delete 2>/dev/null; find /tmp -maxdepth 1 -type s -delete 2>/dev/null
  done
done
