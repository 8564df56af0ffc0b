#!/bin/bash
# Campaign 13 (issue 38), 2026-12-06 16:18-18:59 UTC, as it ran (/work/camp13/drive.sh, drive3.sh, drive4.sh, drive5.sh, merged): every
# trial beside gate_eval's co-tenant (a busy process on one core, --cotenant 1.0), one at a time, in an order that
# brings each pooled row's co-tenant share to a third first; no trial starts after $STOP (epoch seconds).
# Trees first: python benchmarks/gate_eval.py trees /work/geval13   (at 36c4ab3)
cd "$(git rev-parse --show-toplevel)" || exit 2
STOP=${STOP:?}
O=/work/geval13
ok() { [ "$(date +%s)" -lt "$STOP" ]; }
s=1300
g() { ok || exit 0; s=$((s+1)); python benchmarks/gate_eval.py trials $O --plan "$1" --cotenant 1.0 --seed $s; }
b() { ok || exit 0; s=$((s+1)); python benchmarks/bisect_eval.py trials $O --plan "$1" --budget 2m --cotenant 1.0 --seed $s; }
# drive.sh (16:18-17:02; seeds 1301-1306)
b spin05:16:11:1
g default:A2:1
g default:spin05:1
g default:eager:1
g default:A2:2
g default:spin05:2
# paused 17:02-17:08 (the README test in a fresh clone, one vLLM engine test); drive3.sh, seeds from 1321
s=1320
g default:A2:3
g default:spin05:3
# drive4.sh from 17:25 (drive3 with a later STOP), seeds from 1343 (1341-1342 went to the two items already done)
s=1342
g default:A2:4
g default:eager:2
g default:A2:5
g default:spin05:4
b eager:5:3:1
g default:A2:6
g default:spin05:5
g default:eager:3
g default:A2:7
g default:spin05:6
# stopped by hand after spin05:6 started (18:35); then drive5.sh (18:45-18:59), seeds 1361-1362:
s=1360
g default:A2:8
g default:A2:9
# not run: argmax1, nograd
python benchmarks/bisect_eval.py report $O > benchmarks/data/gate-eval-20261206-xeon-amx-13/bisect_report.md
python benchmarks/gate_eval.py report $O > benchmarks/data/gate-eval-20261206-xeon-amx-13/report.md
