#!/usr/bin/env bash
# Campaign 10, fourth wave: after run3.sh, one more bisect trial and more default trials of A2, eager and spin05, as
# many as the session's time allowed (stopped by hand at a trial's end if need be).
set -u
cd /work/main
. .venv/bin/activate
G=/work/geval10
while pgrep -f "run3.sh" >/dev/null; do sleep 10; done
echo "bisect $(date -u +%T)"
python benchmarks/bisect_eval.py trials $G --plan "eager:5:3:2" --budget 2m --seed 12
echo "trials $(date -u +%T)"
python benchmarks/gate_eval.py trials $G --cotenant 0 --seed 12 \
  --plan "default:A2:12,default:eager:7,default:spin05:7,default:argmax1:3,default:nograd:3"
echo "done $(date -u +%T)"
