#!/usr/bin/env bash
# Campaign 11 (issue 38), 2026-12-06: the default `pytest --benchmark-compare` with the confirmation's first stage
# (b0e28fe), against the committed baselines (the 10-run series of baselines/cpu-intel-xeon-amx-2c, recorded at 6abd188,
# 05:22-05:58 UTC), on a 2-core Intel Xeon (AMX). Trees and trials live in /work/geval11; trials.jsonl, true_size.json,
# the report and every trial's whole output (runs/*.txt) are copied here.
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval11
echo "trees $(date -u +%T)"
python benchmarks/gate_eval.py trees $G
echo "true-size $(date -u +%T)"
python benchmarks/gate_eval.py true-size $G --gens 60 --trees A2,eager,spin05
echo "trials $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0.08 --seed 12 \
  --plan "default:A2:20,default:spin05:8,default:eager:4,default:argmax1:2"
echo "done $(date -u +%T)"
