#!/bin/bash
# Captures what gpualert_slurm.core.slurm parses, from a real cluster, for its per-version unit tests
# (tests/test_slurm_client.py): `squeue --json`, `scontrol show job -o` (and `--json`, where
# scontrol has it) of a running job, and,
# for a set of finished jobs, `sacct --json` and the delimited table accounting() asks for.
# Run as root, with the cluster idle:
#   tests/data/slurm/capture.sh docker:gpatrx-ctl /var/lib/gpualert-dcluster-trixie/work   # 24.11
#   tests/data/slurm/capture.sh native /var/lib/gpualert-cluster/work                       # 22.05
#   tests/data/slurm/capture.sh docker:gpasid-ctl /var/lib/gpualert-dcluster-sid/work       # 26.05
# docker:<container> runs every Slurm command in that container (the container cluster's own
# clients); native runs this host's. Writes <kind>-<version>.<ext> next to this script.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WHERE=${1:?docker:<container> or native}
WORK=${2:?a work dir the test user can write: the cluster shared work dir}
USER_=gpatest
D=$WORK/capture-$$
install -d -o "$USER_" -g "$USER_" "$D"

if [ "${WHERE%%:*}" = docker ]; then
    C=${WHERE#docker:}
    as_root() { docker exec -i -w "$D" "$C" "$@"; }
    as_user() { docker exec -i -u "$USER_" -w "$D" "$C" "$@"; }
else
    as_root() { (cd "$D" && "$@"); }
    as_user() { (cd "$D" && runuser -u "$USER_" -- "$@"); }
fi
VER=$(as_root scontrol --version | awk '{print $2}')
VER=${VER%.*}                      # 24.11.5 -> 24.11
echo "capture: Slurm $VER" >&2

sub() { as_user sbatch --parsable "$@" | cut -d';' -f1; }
final() {  # wait until sacct has the job final and settled (state stable for 2 s)
    local j=$1 s prev= i
    for i in $(seq 120); do
        s=$(as_root sacct -n -X -P -j "$j" -o State,NodeList | head -1)
        case "$s" in RUNNING*|PENDING*|COMPLETING*|"") prev= ;;
            *) [ "$s" = "$prev" ] && return 0; prev=$s ;; esac
        sleep 1
    done
    echo "capture: job $j did not end" >&2; return 1
}

# Finished jobs, one per shape the client maps: a cgroup OOM kill, an exit code, a death by a
# signal, a multi-node job with an srun step, a cancelled job (with a name holding spaces and =).
hog="python3 -c 'x = bytearray(600 * 1024 * 1024); print(len(x))'"
oom=$(sub --mem=100M -o 'oom-%j.out' --wrap "$hog")
ex3=$(sub -o 'ex3-%j.out' --wrap 'exit 3')
sig=$(sub -o 'sig-%j.out' --wrap 'kill -SEGV $$')
multi=$(sub -N3 -o 'multi-%j.out' --wrap 'srun -N3 -n3 hostname')
canc=$(sub -J 'job name X=1' -o 'canc-%j.out' --wrap 'sleep 300')
for j in $oom $ex3 $sig $multi; do final "$j"; done
sleep 2; as_root scancel "$canc"; final "$canc"

# A running job (two nodes, a comment with spaces and '='), for squeue and scontrol.
run=$(sub -N2 -J 'two nodes' --comment 'a b=c Reason=x' -o 'run-%j.out' --wrap 'sleep 300')
for i in $(seq 60); do
    [ "$(as_root squeue -h -j "$run" -o %T)" = RUNNING ] && break; sleep 1
done
as_root squeue --json > "$HERE/squeue-$VER.json"
as_root scontrol show job -o "$run" > "$HERE/scontrol-job-$VER.txt"
# the same job as JSON, where scontrol has it (data_parser: 23.02 on); none is written otherwise
as_root scontrol show job --json "$run" > "$HERE/scontrol-job-$VER.json.tmp" 2>/dev/null \
    && mv "$HERE/scontrol-job-$VER.json.tmp" "$HERE/scontrol-job-$VER.json" \
    || { rm -f "$HERE/scontrol-job-$VER.json.tmp"; echo "capture: no scontrol --json on $VER" >&2; }
as_root scancel "$run"

ids=$oom,$ex3,$sig,$multi,$canc
as_root sacct --json -j "$ids" > "$HERE/sacct-$VER.json"
# exactly what slurm.accounting() runs (SACCT_FIELDS, delimiter \x1f)
as_root sacct -n -P --delimiter=$'\x1f' -j "$ids" \
    -o JobIDRaw,State,ExitCode,DerivedExitCode,NodeList,AllocNodes,Partition,User,Reason,Submit,JobName \
    > "$HERE/sacct-table-$VER.txt"
printf '%s\n' "oom=$oom" "exit3=$ex3" "signal=$sig" "multi=$multi" "cancelled=$canc" "running=$run" \
    > "$HERE/jobs-$VER.txt"
echo "capture: wrote $HERE/{squeue,scontrol-job,sacct,sacct-table,jobs}-$VER.*" >&2
