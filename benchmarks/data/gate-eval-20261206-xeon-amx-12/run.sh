#!/bin/bash
# Campaign 12 (issue 38), 2026-12-06 13:16-15:37 UTC, as it ran (/work/camp12/drive*.sh, merged): the 16-commit +5 %
# bisect history to 10 trials interleaved with default-gate unchanged-code runs (A2) to 12, a third of each beside
# gate_eval's co-tenant; then 10 vLLM A/A trials (issue 40, benchmarks/data/vllm-aa-20261206/); then quiet argmax1 and
# nograd default-gate runs, one of each at a time, until $STOP (epoch seconds; no trial starts after it).
# Trees first: python benchmarks/gate_eval.py trees /work/geval12   (at 8596617)
cd "$(git rev-parse --show-toplevel)" || exit 2
STOP=${STOP:?}
ok() { [ "$(date +%s)" -lt "$STOP" ]; }
python benchmarks/bisect_eval.py trials /work/geval12 --plan "spin05:16:11:1" --budget 2m
for k in $(seq 2 10); do
  ok || break
  python benchmarks/bisect_eval.py trials /work/geval12 --plan "spin05:16:11:$k" --budget 2m --cotenant 0.34
  if [ "$k" -le 7 ]; then
    ok || break
    python benchmarks/gate_eval.py trials /work/geval12 --plan "default:A2:$((2*k-2))" --cotenant 0.34 --seed $((1200+k))
  fi
done
for i in $(seq 11 20); do
  ok || break
  bash benchmarks/data/vllm-aa-20261206/run.sh /work/geval12/A "$i" "$i" benchmarks/data/vllm-aa-20261206/aa
done
for n in 1 2 3 4 5 6 7; do
  ok || break
  python benchmarks/gate_eval.py trials /work/geval12 --plan "default:argmax1:$(( n < 5 ? n : 5 )),default:nograd:$n" --seed $((1300+n))
done
python benchmarks/bisect_eval.py report /work/geval12 > benchmarks/data/gate-eval-20261206-xeon-amx-12/bisect_report.md
python benchmarks/gate_eval.py report /work/geval12 > benchmarks/data/gate-eval-20261206-xeon-amx-12/report.md
# added by hand at 15:47 (the driver had stopped): one more eager-attention run quiet, one beside the co-tenant
python benchmarks/gate_eval.py trials /work/geval12 --plan "default:eager:2" --cotenant 0.5 --seed 1401
python benchmarks/gate_eval.py report /work/geval12 > benchmarks/data/gate-eval-20261206-xeon-amx-12/report.md
