#!/bin/bash
# Campaign 14 (issue 38), 2026-12-06 from ~20:00 UTC on a 2-core AMD EPYC Zen 4 (cpu-amd-epyc-avx512vnni-2c): the
# argmax1 and nograd rows beside gate_eval's co-tenant (a busy process on one core, --cotenant 1.0), the two rows
# whose pooled co-tenant share was under a third (1/10, 0/10). One trial at a time, alternating; no trial starts
# after $STOP (epoch seconds). The trees' baselines are this class's committed series (10 runs,
# benchmarks/data/baselines-series-20261206-epyc-zen4/).
# Trees first: python benchmarks/gate_eval.py trees /work/geval14
cd "$(git rev-parse --show-toplevel)" || exit 2
STOP=${STOP:?}
O=/work/geval14
ok() { [ "$(date +%s)" -lt "$STOP" ]; }
s=1400
g() { ok || exit 0; s=$((s+1)); python benchmarks/gate_eval.py trials $O --plan "$1" --cotenant 1.0 --seed $s; }
for n in 1 2 3 4 5 6; do
  g default:nograd:$n
  g default:argmax1:$n
done
