#!/usr/bin/env bash
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval9
echo "trials wave 6 $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0.34 --seed 17 \
  --plan "ab:A2:2m:42,ab:spin05:2m:11,ab:spin02:5m:6,pytest:A2:40,pytestci:nograd:6,pytestci:spin05:6,pytest:spin05:6"
echo "done $(date -u +%T)"
