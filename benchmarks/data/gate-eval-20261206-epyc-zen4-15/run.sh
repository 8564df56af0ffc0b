#!/bin/bash
# Campaign 15 (issue 38), 2026-12-06 from ~22:50 UTC on a 2-core AMD EPYC Zen 4 (cpu-amd-epyc-avx512vnni-2c), at
# 5797e9d: the operator diff's wall time after opprofile stopped calling torch's key_averages() (1d48b87) and
# opdiff_run's 50-s pair budget (5797e9d). Campaign 14 measured 50-73 s beside the co-tenant (4 of 6 over the 60-s
# goal). Every trial beside gate_eval's co-tenant (a busy process on one core, --cotenant 1.0), the worst case for
# that row; nograd and eager alternate. One trial at a time; no trial starts after $STOP (epoch seconds). The trees'
# baselines are this class's committed series (benchmarks/data/baselines-series-20261206-epyc-zen4/).
# Trees first: python benchmarks/gate_eval.py trees /work/geval15
cd "$(git rev-parse --show-toplevel)" || exit 2
STOP=${STOP:?}
O=/work/geval15
ok() { [ "$(date +%s)" -lt "$STOP" ]; }
s=1500
g() { ok || exit 0; s=$((s+1)); python benchmarks/gate_eval.py trials $O --plan "$1" --cotenant 1.0 --seed $s; }
for n in 1 2 3 4 5 6; do
  g default:nograd:$n
  [ "$n" -le 3 ] && g default:eager:$n
done
