#!/bin/bash
# quiet A/A perfsuite ab at 2 threads (the cell's) vs 1 thread (OMP_NUM_THREADS=1 set by the user), ABBA
cd /work/geval3/A2
. /work/main/.venv/bin/activate
i=0
for t in 2 1 1 2; do
  i=$((i+1))
  if [ $t = 1 ]; then export OMP_NUM_THREADS=1; else unset OMP_NUM_THREADS; fi
  s=$(date +%s)
  PYTHONPATH=/work/geval3/A2 python -m perfsuite.cli ab --a /work/geval3/A --b /work/geval3/A2 --budget 2m --backend torch --json /work/thr/ab-$i-t$t.json > /work/thr/ab-$i-t$t.log 2>&1
  echo "$i t=$t rc=$? wall=$(( $(date +%s) - s )) load=$(cut -d' ' -f1 /proc/loadavg) $(date +%T)" >> /work/thr/summary
done
echo done >> /work/thr/summary
