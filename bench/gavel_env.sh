#!/usr/bin/env bash
# Builds Gavel's simulator for bench/gavel_policies.py from a Gavel git dir (none of Gavel's code
# is part of this project):
#
#     bash bench/gavel_env.sh GAVEL_GIT_DIR DEST     # e.g. a bare clone of stanford-futuredata/gavel
#
# DEST/src/scheduler   Gavel's scheduler/ at c4fa400 (its traces/msr left out: large, unused here),
#                      with policies/max_min_fairness.py and policies/policy.py of c4d18a6, the
#                      commit before PR #237: c4fa400's packed policies crash with "Invalid reshape
#                      dimensions"; and the gRPC stubs its Makefile's `rpc_stubs` recipe generates.
# DEST/venv            Python 3.11 with what the simulator imports: numpy below 2.4 (Gavel's code
#                      uses what 2.4 removed), cvxpy with ECOS (Gavel's solver), scipy, grpcio,
#                      grpcio-tools, protobuf, matrix_completion (imported by scheduler.py; it imports
#                      scikit-learn), psutil (utils.py).
#
# Then: python bench/gavel_policies.py --gavel DEST/src/scheduler --gavel-python DEST/venv/bin/python ...
# PYTHON (default python3.11) and COMMIT / POLICY_COMMIT may be overridden from the environment;
# SOURCE_ONLY=1 stops after DEST/src (no venv, no stubs).
set -euo pipefail

GIT_DIR=${1:?usage: gavel_env.sh GAVEL_GIT_DIR DEST}
DEST=${2:?usage: gavel_env.sh GAVEL_GIT_DIR DEST}
COMMIT=${COMMIT:-c4fa400}
POLICY_COMMIT=${POLICY_COMMIT:-c4d18a6}
PYTHON=${PYTHON:-python3.11}
GIT=(git --git-dir="$GIT_DIR")

mkdir -p "$DEST/src"
DEST=$(cd "$DEST" && pwd)

# scheduler/ without traces/msr: each entry named, since a shallow or partial copy of the
# repository may lack those blobs and `git archive` stops at the first missing one (given paths,
# it still prints "invalid object" for them, exits 0 and writes everything else)
paths=()
while IFS= read -r path; do
    if [[ $path == scheduler/traces ]]; then
        while IFS= read -r trace; do
            [[ $trace == scheduler/traces/msr ]] || paths+=("$trace")
        done < <("${GIT[@]}" ls-tree --name-only "$COMMIT" scheduler/traces/)
    else
        paths+=("$path")
    fi
done < <("${GIT[@]}" ls-tree --name-only "$COMMIT" scheduler/)
rm -rf "$DEST/src/scheduler"
"${GIT[@]}" archive "$COMMIT" -- "${paths[@]}" | tar -x -C "$DEST/src"
for file in policies/max_min_fairness.py policies/policy.py; do
    "${GIT[@]}" show "$POLICY_COMMIT:scheduler/$file" > "$DEST/src/scheduler/$file"
done

if [[ ${SOURCE_ONLY:-} == 1 ]]; then    # the source tree alone (tests/unit/test_gavel_env.py)
    exit 0
fi

if [[ ! -x $DEST/venv/bin/python ]]; then
    "$PYTHON" -m venv "$DEST/venv"
fi
"$DEST/venv/bin/python" -m pip install -q 'numpy==2.3.5' 'cvxpy==1.9.3' ecos scipy grpcio \
    grpcio-tools protobuf matrix_completion scikit-learn psutil

# the Makefile's rpc_stubs recipe, read off it rather than copied, so it follows the commit
cd "$DEST/src/scheduler"
mkdir -p runtime/rpc_stubs
grep -E '^\s+python -m grpc_tools\.protoc ' Makefile | sed -E 's/^\s+python //' |
    while IFS= read -r recipe; do
        # shellcheck disable=SC2086  # the recipe's words are its arguments
        "$DEST/venv/bin/python" $recipe
    done
ls runtime/rpc_stubs/*_pb2_grpc.py > /dev/null
"$DEST/venv/bin/python" -c "import numpy, cvxpy; print('numpy', numpy.__version__, 'cvxpy', cvxpy.__version__, cvxpy.installed_solvers())"
echo "Gavel at $COMMIT (policies of $POLICY_COMMIT) in $DEST/src/scheduler, Python $DEST/venv/bin/python"
