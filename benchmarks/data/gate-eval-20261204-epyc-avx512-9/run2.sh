#!/usr/bin/env bash
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval9
echo "trials wave 2 $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0.34 --seed 13 \
  --plan "ab:A2:2m:40,ab:spin05:2m:10,ab:spin02:5m:4,pytest:A2:6,pytestci:nograd:4,pytestci:spin05:4"
echo "done $(date -u +%T)"
