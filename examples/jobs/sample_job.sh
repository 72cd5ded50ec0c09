#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
# A stand-in for a training job that honours gavel's preemption protocol
# (the PyTorch iterator does the same for real training):
# one "step" per second; on SIGUSR2 it saves its step and exits with code 85,
# which RequeueExitHold=85 in slurm.conf turns into "requeue me, held".
# Environment: TOTAL (steps), STATE_DIR (where the step counter is kept).
stop=0
trap 'stop=1' USR2
state="${STATE_DIR:-.}/job-$SLURM_JOB_ID.step"
step=$(cat "$state" 2>/dev/null || echo 0)
echo "$(date +%T) start: restart ${SLURM_RESTART_COUNT:-0}, step $step, on $SLURMD_NODENAME ($SLURM_JOB_PARTITION)"
while [ "$step" -lt "${TOTAL:-30}" ]; do
  sleep 1
  step=$((step + 1))
  echo "$step" > "$state.tmp" && mv "$state.tmp" "$state"
  if [ "$stop" = 1 ]; then
    echo "$(date +%T) preempted: checkpoint at step $step"
    exit 85
  fi
done
echo "$(date +%T) done: $step steps"
