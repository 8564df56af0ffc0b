#!/usr/bin/env bash
# vLLM cell A/A trials (unchanged tree against itself) on 2 cores, the second series after
# benchmarks/data/vllm-ab-20261206/gens30 (its 10 A/A trials), same tree (8596617), same command. Usage:
#   bash benchmarks/data/vllm-aa-20261206/run.sh /work/geval12/A FIRST LAST OUT
set -u
TREE=$1; FIRST=$2; LAST=$3; OUT=$(realpath -m "$4")
mkdir -p "$OUT"
cd "$TREE" || exit 2
for i in $(seq "$FIRST" "$LAST"); do
  t0=$(date +%s.%N)
  PYTHONPATH=$TREE python -m perfsuite.cli ab --a . --b . --backend vllm --budget 180s --json "$OUT/aa-$i.json" > "$OUT/aa-$i.txt" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "{\"trial\": \"aa-$i\", \"rc\": $rc, \"wall_s\": $(echo "$t1 - $t0" | bc), \"started\": \"$(date -u -d @${t0%.*} +%FT%TZ)\"}" >> "$OUT/trials.jsonl"
  find /tmp -maxdepth 1 -name 'vllm_dist_*' -user "$(id -u)" -delete 2>/dev/null
  find /tmp -maxdepth 1 -type s -user "$(id -u)" -newermt "@${t0%.*}" -delete 2>/dev/null  # the run's own sockets
done
