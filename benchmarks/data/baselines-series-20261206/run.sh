#!/usr/bin/env bash
# Re-record the committed baselines at the current commit (issue 40), a new series: 10 `perfsuite run --update-baselines`, each
# one's output kept beside this script. Run from the repository root with the venv active, on a quiet machine.
set -uo pipefail
out="$(dirname "$0")"
for i in $(seq 1 10); do
  date -u +"run $i start %Y-%m-%dT%H:%M:%SZ" | tee -a "$out/runs.log"
  perfsuite run --update-baselines > "$out/run$i.txt" 2>&1
  echo "run $i exit $? $(date -u +%H:%M:%S)" | tee -a "$out/runs.log"
  [ "$i" -lt 10 ] && sleep 120
done
