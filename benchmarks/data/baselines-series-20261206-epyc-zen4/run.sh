#!/bin/bash
# The first committed series of the AMD EPYC Zen 4 class (cpu-amd-epyc-avx512vnni-2c), 2026-12-06: the README's
# refresh command, back to back (no sleep: the session's time was short), each run's output kept.
#   RUNS=5 run.sh               runs 1-5 at 6b2cffe (19:24-19:34 UTC): 1-3 kept; 4 and 5 refused by the acceptance's
#                               estimate-only rule (kept as refused-run4.txt, refused-run5.txt), fixed in the next commit
#   FIRST=4 RUNS=10 run.sh      runs 4-10 at 6cdbdf0 (19:35-19:47): 4 and 5 kept; 6-10 refused (6-9: vLLM TPOT +12 to +26 %
#                               against 5 runs spanning 57 %; 10: ONNX Runtime TPOT +54 %; kept as refused-run6..10.txt), fixed in the next commit
#   FIRST=6 RUNS=10 run.sh      runs 6-10 after that fix
cd "$(git rev-parse --show-toplevel)" || exit 2
D=benchmarks/data/baselines-series-20261206-epyc-zen4
for i in $(seq "${FIRST:-1}" "${RUNS:-5}"); do
  echo "== run $i $(date -u +%FT%TZ) at $(git rev-parse --short HEAD)"
  perfsuite run --update-baselines > "$D/run$i.txt" 2>&1
  echo "rc=$? $(date -u +%FT%TZ)"
  tail -3 "$D/run$i.txt"
done
