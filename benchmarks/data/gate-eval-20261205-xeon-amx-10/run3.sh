#!/usr/bin/env bash
# Campaign 10, third wave (21:32): run2.sh was stopped after trial 7 (the co-tenant trials took ~10 min each, more
# than the session had); the B trees got 42a06bb, 919b010 and c8f92db cherry-picked (the operator diff's profile
# pairs side by side; nothing else the trials measure changed). One bisect trial first, then the quiet trials.
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval10
echo "bisect $(date -u +%T)"
python benchmarks/bisect_eval.py trials $G --plan "eager:5:3:1" --budget 2m --seed 10
echo "trials $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0 --seed 11 \
  --plan "default:A2:8,default:eager:4,default:spin05:4,default:argmax1:3,default:nograd:3"
echo "done $(date -u +%T)"
