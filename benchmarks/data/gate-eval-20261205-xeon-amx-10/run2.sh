#!/usr/bin/env bash
# Campaign 10, restarted at 20:56 after run.sh stopped at the spin02 tree (DECODE_HEAD had drifted from the backend's
# `_step`); A, A2, their baselines, A2's true size, one default:A2 trial and the bisect history were kept.
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval10
echo "trees $(date -u +%T)"
python benchmarks/gate_eval.py trees $G
echo "true-size $(date -u +%T)"
python benchmarks/gate_eval.py true-size $G --gens 60 --trees eager,spin05,nograd,argmax1
echo "trials $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0.34 --seed 10 \
  --plan "default:A2:16,default:eager:8,default:spin05:8,default:argmax1:5,default:nograd:5"
echo "bisect $(date -u +%T)"
python benchmarks/bisect_eval.py trials $G --plan "eager:5:3:3" --budget 2m --cotenant 0.34 --seed 10
echo "done $(date -u +%T)"
