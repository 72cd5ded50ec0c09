#!/usr/bin/env bash
# Give a local dev cluster (`slurm-gavel cluster up --accounting`, default types v100, p100,
# k80: 2 nodes x 4 GPUs each) a short history to replay: 18 plain jobs (no gavel comment)
# of two accounts, 2 s apart, 1, 2 or 4 GPUs, most of them asking for the V100 partition as
# users do, each a sleep of 10-40 s.  Then `slurm-gavel replay` (README: "Try it on your
# cluster's history first").
#
#     slurm-gavel cluster up --accounting --dir /tmp/c
#     SLURM_CONF=/tmp/c/slurm.conf examples/jobs/history_mix.sh
set -euo pipefail
: "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the dev cluster}"
cluster="$(scontrol show config | awk '$1 == "ClusterName" {print $3}')"
for account in physics bio; do
    sacctmgr -i add account "$account" cluster="$cluster" >/dev/null 2>&1 || true
    sacctmgr -i add user root account="$account" cluster="$cluster" >/dev/null 2>&1 || true
done
work="$(mktemp -d /tmp/gavel-mix.XXXXXX)"
# partition gpus seconds account, one job per line
jobs="v100 1 30 physics
v100 2 20 bio
v100 4 40 physics
p100 1 20 bio
v100 1 25 bio
v100 2 30 physics
k80 1 15 physics
v100 1 20 bio
v100 4 20 bio
p100 2 30 physics
v100 1 35 physics
v100 2 15 bio
k80 2 25 bio
v100 1 10 physics
p100 4 20 physics
v100 1 30 bio
v100 2 25 physics
k80 1 20 bio"
ids=()
while read -r partition gpus seconds account; do
    ids+=("$(sbatch --parsable -p "$partition" --gres="gpu:$gpus" -A "$account" -J "mix-$account" \
             -o "$work/%j.out" --wrap "sleep $seconds")")
    sleep 2
done <<< "$jobs"
echo "submitted ${ids[*]}; waiting for them to finish"
while [ -n "$(squeue -h -j "$(IFS=,; echo "${ids[*]}")" -t PD,R,CG 2>/dev/null)" ]; do sleep 2; done
sleep 3                                   # slurmdbd gets the last ends a moment later
echo "done: try slurm-gavel replay --start now-1hour --throughputs simulation_throughputs.json ..."
