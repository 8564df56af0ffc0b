#!/usr/bin/env bash
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval9
echo "trees $(date -u +%T)"
python benchmarks/gate_eval.py trees $G --fresh --record 4
echo "true-size $(date -u +%T)"
python benchmarks/gate_eval.py true-size $G --gens 60 --trees A2,spin02,spin05,nograd
echo "trials $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0.34 --seed 12 \
  --plan "ab:A2:2m:40,ab:spin05:2m:14,ab:spin02:5m:6,pytest:A2:8,pytestci:nograd:4,pytestci:spin05:4"
echo "done $(date -u +%T)"
