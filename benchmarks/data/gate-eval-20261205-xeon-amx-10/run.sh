#!/usr/bin/env bash
# Campaign 10 (issue 38): the default `pytest --benchmark-compare` on real regressions, the outputs guard, the operator
# diff and `perfsuite bisect`, on a 2-core Intel Xeon (AMX), 2026-12-05. Trees and trials live in /work/geval10;
# trials.jsonl, bisect.jsonl, true_size.json, the reports and every trial's whole output (runs/*.txt) are copied here.
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval10
echo "trees $(date -u +%T)"
python benchmarks/gate_eval.py trees $G --fresh --record 5
echo "true-size $(date -u +%T)"
python benchmarks/gate_eval.py true-size $G --gens 60 --trees A2,eager,spin05,nograd,argmax1
echo "trials $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0.34 --seed 10 \
  --plan "default:A2:16,default:eager:8,default:spin05:8,default:argmax1:5,default:nograd:5"
echo "bisect $(date -u +%T)"
python benchmarks/bisect_eval.py trials $G --plan "eager:5:3:3" --budget 2m --cotenant 0.34 --seed 10
echo "done $(date -u +%T)"
