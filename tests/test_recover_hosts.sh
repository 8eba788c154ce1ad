#!/bin/sh
# Description: recovery across hosts: 2 hosts of 2 workers each (on this
# machine, over loopback) run tests/recover_train under their own kvsrun
# --restarts; a worker killed on host 1, host 1's kvsd killed, host 0's
# kvsd killed, a whole host killed and started again by hand: every host
# rolls back to the newest commit all hold, the jobs end with exit 0 and
# every key equals, bit for bit, the same job's on one host without a
# fault; restarts used up end both hosts with a clear message, no hang; a
# checkpoint folder of another job is refused; steps that differ between
# hosts fail a commit for every worker; a short kill loop across both
# hosts ends with the values of a run without faults; a fault after one
# host's workers have all ended: that host's kvsd restarts for the others;
# a kvsd killed before it serves (while it joins) is started again.
# TAP output. Every case runs under its own `timeout`.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

top_builddir=${top_builddir:-.}
kvsrun=$top_builddir/daemon/kvsrun/kvsrun
kvsd=$top_builddir/daemon/kvsd/kvsd
train=$top_builddir/tests/recover_train
steps=60
every=10
step_ms=25
n_test=0
echo "1..13"
if [ ! -x "$kvsrun" ] || [ ! -x "$kvsd" ] || [ ! -x "$train" ]; then
    skip_all 13 "kvsrun, kvsd or tests/recover_train not built"
fi
private_runtime; [ -n "${KEEP:-}" ] && echo "# runtime $rt"
KVSD=$kvsd
export KVSD
unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_TIMEOUT
KVS_TIMEOUT=$((30 * slow))
export KVS_TIMEOUT
w=$rt/work
mkdir -p "$w"
bg=""
trap 'for p in $bg; do kill -KILL "$p" 2>/dev/null; done; ports_release; [ -n "${KEEP:-}" ] || rm -rf "$rt"' EXIT

# The values of the job without a fault, on one host of 4 workers.
timeout -k 5 $((120 * slow)) "$kvsrun" -j base -n 4 "$train" $steps $every "$w/base" \
    >"$w/base.log" 2>&1 || { cat "$w/base.log"; echo "Bail out! the run without faults failed"; exit 1; }

# host R JOB LIMIT OPTIONS...: host R's kvsrun of JOB in the background
# (pid in $hR), its output in $w/JOB.hR.log.
host() {
    h_r=$1 h_j=$2 h_limit=$3
    shift 3
    timeout -k 5 $((h_limit * slow)) "$kvsrun" -j "$h_j" -n 2 --nodes 2 --node-rank "$h_r" \
        --coord "127.0.0.1:$port" --join-timeout $((10 * slow)) "$@" \
        "$train" $steps $every "$w/$h_j.out$h_r" $step_ms >>"$w/$h_j.h$h_r.log" 2>&1 &
    eval "h$h_r=\$!"
    bg="$bg $!"
}

# start JOB OPTIONS...: both hosts of JOB.
start() {
    s_j=$1
    shift
    port=$(free_port) || exit 1
    host 0 "$s_j" 120 "$@"
    host 1 "$s_j" 120 "$@"
}

# steps_done JOB RANK N: rank RANK of JOB has run N steps or more.
steps_done() {
    [ -f "$w/$1.out$(($2 / 2)).rank$2" ] && [ "$(wc -l <"$w/$1.out$(($2 / 2)).rank$2")" -ge "$3" ]
}

# Processes are found by their job's name and also by this test's
# runtime folder: another run of this test (the sanitizers' lane beside
# the plain build's) has jobs of the same names.

# pid_of JOB RANK: the worker of global rank RANK of JOB.
pid_of() {
    grep -lzx "KVS_JOB=$1.h$(($2 / 2))" /proc/[0-9]*/environ 2>/dev/null \
        | xargs -r grep -lzx "KVS_RANK=$2" 2>/dev/null \
        | xargs -r grep -lzxF "XDG_RUNTIME_DIR=$rt" 2>/dev/null \
        | sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' | head -1
}

# kvsd_of JOB HOST: the kvsd of host HOST of JOB.
kvsd_of() {
    for k_pid in $(pgrep -f -- "--job $1 .*--node-rank $2"); do
        if grep -qzxF "XDG_RUNTIME_DIR=$rt" "/proc/$k_pid/environ" 2>/dev/null; then
            echo "$k_pid"
            return
        fi
    done
}

# kill_worker JOB RANK STEPS: SIGKILL to worker RANK of JOB once it ran
# STEPS steps; says so and fails if it never did.
kill_worker() {
    if wait_for 300 steps_done "$1" "$2" "$3" && p=$(pid_of "$1" "$2") && [ -n "$p" ]; then
        kill -KILL "$p"
    else
        echo "# rank $2 never ran $3 steps"
        return 1
    fi
}

# finish JOB: 0 when both hosts end with exit 0 and host 0's rank 0 wrote
# the values of the run without faults; says what is wrong otherwise.
finish() {
    wait "$h0"; f0=$?
    wait "$h1"; f1=$?
    f_bad=""
    [ "$f0" -eq 0 ] && [ "$f1" -eq 0 ] || f_bad="hosts exited $f0 and $f1"
    cmp -s "$w/base" "$w/$1.out0" || f_bad="$f_bad${f_bad:+; }values differ from the run without faults"
    if [ -n "$f_bad" ]; then
        echo "# $f_bad"
        sed 's/^/# h0: /' "$w/$1.h0.log"
        sed 's/^/# h1: /' "$w/$1.h1.log"
        return 1
    fi
}

# resumed_at JOB RANK: the step rank RANK last resumed at (its job rolled
# back to), as it said; -1 if it never did. (A roll back need not make it
# run a step twice: it may die just after a commit.)
resumed_at() {
    r_at=$(sed -n "s/^recover_train rank $2: resumed at step \([0-9]*\)$/\1/p" \
        "$w/$1.h$(($2 / 2)).log" | tail -1)
    echo "${r_at:--1}"
}

# 1. A worker killed on host 1.
start wk --restarts 2
ok=1
kill_worker wk 3 25 || ok=0
finish wk || ok=0
at=$(resumed_at wk 0)
if [ $((at % every)) -ne 0 ] || [ "$at" -lt $every ]; then
    echo "# rank 0 resumed at step $at, not at a commit"; ok=0
fi
for r in 0 1 2; do
    grep -q "recover_train rank $r: resumed 1 times" "$w/wk.h$((r / 2)).log" \
        || { echo "# rank $r did not get KVS_ERESTART once"; ok=0; }
done
grep -q "rolled back with another host of the job.*not counted against --restarts" \
    "$w/wk.h0.log" || { echo "# host 0's kvsrun did not say its roll back"; ok=0; }
tap $((1 - ok)) "a worker killed on host 1: every host rolls back to step $at, the job ends with the values of a run without faults"

# 2. dist_async: commits across hosts, and a worker killed on host 0.
KVS_TEST_STORE=dist_async
export KVS_TEST_STORE
start as --restarts 2
ok=1
kill_worker as 1 25 || ok=0
wait "$h0"; a0=$?
wait "$h1"; a1=$?
[ "$a0" -eq 0 ] && [ "$a1" -eq 0 ] || { echo "# hosts exited $a0 and $a1"; ok=0; }
at=$(resumed_at as 2)
if [ $((at % every)) -ne 0 ] || [ "$at" -lt $every ]; then
    echo "# rank 2 resumed at step $at, not at a commit"; ok=0
fi
[ -s "$w/as.out0" ] || { echo "# no values written"; ok=0; }
if [ "$ok" -eq 0 ]; then sed 's/^/# h0: /' "$w/as.h0.log"; sed 's/^/# h1: /' "$w/as.h1.log"; fi
unset KVS_TEST_STORE
tap $((1 - ok)) "dist_async: commits across hosts; a worker killed on host 0 rolls both hosts back to step $at and the job ends"

# 3, 4. A host's kvsd killed: its kvsrun restarts it (counted), the other
# host's kvsd rolls back with it (not counted).
for victim in 1 0; do
    j=kd$victim
    start $j --restarts 2
    ok=1
    if wait_for 300 steps_done $j 0 25 && p=$(kvsd_of $j $victim) && [ -n "$p" ]; then
        kill -KILL "$p"
    else
        echo "# no kvsd of host $victim to kill"; ok=0
    fi
    finish $j || ok=0
    grep -q "kvsd (pid [0-9]*) was killed by signal 9.*restart 1 of 2" "$w/$j.h$victim.log" \
        || { echo "# host $victim's kvsrun did not count its kvsd's restart"; ok=0; }
    grep -q "rolled back with another host" "$w/$j.h$((1 - victim)).log" \
        || { echo "# host $((1 - victim)) did not roll back with it"; ok=0; }
    tap $((1 - ok)) "host $victim's kvsd killed: both hosts roll back to step $(resumed_at $j 0); the values of a run without faults"
done

# 5. A whole host lost (its kvsrun, kvsd and workers killed) and started
# again by hand with the same command: it restores from its checkpoint
# folder, and host 0, rolled back, takes it in again.
j=wh
port=$(free_port) || exit 1
host 0 $j 120 --restarts 2 --checkpoint "$w/ck0"
host 1 $j 120 --restarts 2 --checkpoint "$w/ck1"
ok=1
if wait_for 300 steps_done $j 2 35; then
    pids="$(pgrep -P "$h1" | head -1) $(kvsd_of $j 1) $(pid_of $j 2) $(pid_of $j 3)"
    for p in $pids; do kill -KILL "$p"; done
    { wait "$h1"; } 2>/dev/null       # "Killed", said by the shell
    for p in $pids; do wait_for 100 gone "$p" || echo "# $p lives on"; done
    host 1 $j 120 --restarts 2 --checkpoint "$w/ck1"
else
    echo "# rank 2 never ran 35 steps"; ok=0
fi
finish $j || ok=0
at=$(resumed_at $j 2)
if [ $((at % every)) -ne 0 ] || [ "$at" -lt $every ]; then
    echo "# rank 2 resumed at step $at, not at a commit"; ok=0
fi
tap $((1 - ok)) "a whole host killed and started again by hand: it resumes at step $at with the others; the values of a run without faults"

# 6. Restarts used up on host 1: it fails naming the rank; host 0, rolled
# back, waits for it until --join-timeout and fails saying so. No hang.
j=ex
start $j --restarts 1
ok=1
for round in 1 2; do
    kill_worker $j 3 $((15 * round)) || ok=0
done
t0=$(now_ms)
wait "$h0"; e0=$?
wait "$h1"; e1=$?
took=$(($(now_ms) - t0))
# Failed, each with its own status (a worker's signal: 137), well before
# the cases' timeout.
[ "$e0" -ne 0 ] && [ "$e1" -ne 0 ] && [ "$took" -lt $((60000 * slow)) ] \
    || { echo "# hosts exited $e0 and $e1 after $took ms"; ok=0; }
grep -q "its 1 restart is used up" "$w/$j.h1.log" || { echo "# host 1 did not say why"; ok=0; }
grep -q "did not all join within" "$w/$j.h0.log" || { echo "# host 0 did not say why"; ok=0; }
if [ "$ok" -eq 0 ]; then sed 's/^/# h0: /' "$w/$j.h0.log"; sed 's/^/# h1: /' "$w/$j.h1.log"; fi
tap $((1 - ok)) "restarts used up on host 1: both hosts fail with a clear message within the join deadline (${took} ms)"

# 7. A checkpoint folder whose newest snapshot is another job's (host 0's
# of the whole-host case): host 1 refuses to start, naming it; host 0
# fails at its join deadline.
j=wj
mkdir -p "$w/other"
cp "$(ls "$w"/ck0/snap-*.kvs | tail -1)" "$w/other/"
port=$(free_port) || exit 1
host 0 $j 60 --restarts 1
host 1 $j 60 --restarts 1 --checkpoint "$w/other"
ok=1
wait "$h0"; e0=$?
wait "$h1"; e1=$?
[ "$e0" -ne 0 ] && [ "$e1" -ne 0 ] || { echo "# hosts exited $e0 and $e1"; ok=0; }
grep -q "is a snapshot of job 'wh.h0', not 'wj.h1'" "$w/$j.h1.log" \
    || { echo "# host 1 did not name the snapshot"; ok=0; }
grep -q "did not all join within" "$w/$j.h0.log" || { echo "# host 0 did not say why"; ok=0; }
if [ "$ok" -eq 0 ]; then sed 's/^/# h0: /' "$w/$j.h0.log"; sed 's/^/# h1: /' "$w/$j.h1.log"; fi
tap $((1 - ok)) "a checkpoint folder of another job: its host refuses to start, naming it; the other fails at the join deadline"

# 8. Steps that differ between hosts: KVS_EBADARG for every worker (each
# host's own workers agree), then a commit of one step goes through; with
# recovery and without.
commit=$top_builddir/tests/dist_commit
for opts in "--restarts 1" ""; do
    j=bs$(echo "$opts" | tr -dc 0-9)
    port=$(free_port) || exit 1
    # shellcheck disable=SC2086
    for r in 0 1; do
        timeout -k 5 $((60 * slow)) "$kvsrun" -j "$j" -n 1 --nodes 2 --node-rank $r \
            --coord "127.0.0.1:$port" --join-timeout $((10 * slow)) $opts \
            "$commit" hoststep >"$w/$j.h$r.log" 2>&1 &
        eval "h$r=\$!"
        bg="$bg $!"
    done
    ok=1
    wait "$h0"; b0=$?
    wait "$h1"; b1=$?
    [ "$b0" -eq 0 ] && [ "$b1" -eq 0 ] || { echo "# hosts exited $b0 and $b1"; ok=0; }
    if [ "$ok" -eq 0 ]; then sed 's/^/# h0: /' "$w/$j.h0.log"; sed 's/^/# h1: /' "$w/$j.h1.log"; fi
    tap $((1 - ok)) "steps that differ between hosts${opts:+ ($opts)}: KVS_EBADARG for every worker, naming a host; the next commit goes through"
done

# 10. A kill loop across hosts: a worker or a kvsd of either host killed
# every 1-2 s until the job ends; each host's kvsrun with its own folder.
steps=200
timeout -k 5 $((120 * slow)) "$kvsrun" -j base2 -n 4 "$train" $steps $every "$w/base2" \
    >"$w/base2.log" 2>&1 || echo "# the run without faults failed"
j=kl
port=$(free_port) || exit 1
host 0 $j 240 --restarts 20 --checkpoint "$w/kl0"
host 1 $j 240 --restarts 20 --checkpoint "$w/kl1"
kills=0
while ! gone "$h0" && ! gone "$h1"; do
    sleep "1.$(($(od -An -N1 -tu1 /dev/urandom) % 10))"
    v=$(($(od -An -N1 -tu1 /dev/urandom) % 2))
    if [ $(($(od -An -N1 -tu1 /dev/urandom) % 3)) -eq 0 ]; then
        p=$(kvsd_of $j $v)
    else
        p=$(pid_of $j $((2 * v + $(od -An -N1 -tu1 /dev/urandom) % 2)))
    fi
    if [ -n "$p" ] && kill -KILL "$p" 2>/dev/null; then kills=$((kills + 1)); fi
done
ok=1
wait "$h0"; l0=$?
wait "$h1"; l1=$?
[ "$l0" -eq 0 ] && [ "$l1" -eq 0 ] || { echo "# hosts exited $l0 and $l1"; ok=0; }
cmp -s "$w/base2" "$w/$j.out0" || { echo "# values differ from the run without faults"; ok=0; }
[ "$kills" -ge 2 ] || { echo "# only $kills kills"; ok=0; }
if [ "$ok" -eq 0 ]; then sed 's/^/# h0: /' "$w/$j.h0.log"; sed 's/^/# h1: /' "$w/$j.h1.log"; fi
tap $((1 - ok)) "a kill loop across hosts ($kills kills of workers and kvsd): the values of a run without faults"

# kill_after_host JOB LINGER_RANK NOTE TITLE: JOB, in which rank
# LINGER_RANK lingers before its final pull; once the other host's
# workers have all ended, host 0's kvsd is killed. The job must end with
# the values of a run without faults, and the kvsrun of the host whose
# workers ended must say NOTE (it restarts its kvsd).
kill_after_host() {
    k_j=$1 k_rank=$2
    k_host=$((1 - k_rank / 2))
    KVS_TEST_LINGER_MS=$((6000 * slow)) KVS_TEST_LINGER_RANK=$k_rank
    export KVS_TEST_LINGER_MS KVS_TEST_LINGER_RANK
    start "$k_j" --restarts 2
    unset KVS_TEST_LINGER_MS KVS_TEST_LINGER_RANK
    ok=1
    if wait_for 300 host_done "$k_j" "$k_host" "$k_rank" && p=$(kvsd_of "$k_j" 0) && [ -n "$p" ]; then
        kill -KILL "$p"
    else
        echo "# host $k_host's workers did not end first"; ok=0
    fi
    finish "$k_j" || ok=0
    grep -q "$3" "$w/$k_j.h$k_host.log" || { echo "# host $k_host's kvsrun did not restart its kvsd"; ok=0; }
    tap $((1 - ok)) "$4"
}

# kvsd_listed JOB HOST: a kvsd of host HOST of JOB runs.
kvsd_listed() { [ -n "$(kvsd_of "$1" "$2")" ]; }

# restarted_before_serving JOB: host 0's kvsrun of JOB said that it
# started its kvsd again after a kill before it served.
restarted_before_serving() {
    grep -q "killed by signal 9 (Killed) before it served job '$1.h0'" "$w/$1.h0.log" \
        && grep -q "kvsd (pid [0-9]*) started again: restart 1 of 2" "$w/$1.h0.log"
}

# host_done JOB HOST RANK: both workers of host HOST of JOB have ended,
# and rank RANK has run every step.
host_done() {
    [ -z "$(pid_of "$1" $((2 * $2)))" ] && [ -z "$(pid_of "$1" $((2 * $2 + 1)))" ] \
        && steps_done "$1" "$3" $steps
}

# 11. A fault once host 1's workers have all ended (rank 0 lingers before
# its final pull): host 1's kvsd rolls back too and its kvsrun starts it
# again for host 0 to join; the job ends with the values of a run without
# faults.
steps=60
kill_after_host lg 0 "rolled back with another host of the job after this host's workers ended" \
    "host 0's kvsd killed after host 1's workers ended: host 1's kvsd restarts for it; the values of a run without faults"

# 12. The other way round: host 0's workers have all ended (rank 2 lingers)
# when host 0's kvsd is killed: host 0's kvsrun starts it again (its own
# restart), host 1 rolls back with it, and the job ends with the values of
# a run without faults.
kill_after_host lk 2 "was killed by signal 9.* after this host's workers ended: restart 1 of 2" \
    "host 0's kvsd killed after its own workers ended: its kvsrun starts it again for host 1 to finish; the values of a run without faults"

# 13. A kvsd killed before it serves (a fault loop may strike one that is
# still joining): host 0 starts alone, its kvsd is killed while it waits
# for host 1, and its kvsrun starts it again, counted. Then host 1 comes
# and the job ends with the values of a run without faults.
j=kj
port=$(free_port) || exit 1
host 0 $j 120 --restarts 2
ok=1
if wait_for 300 kvsd_listed $j 0 && p=$(kvsd_of $j 0) && [ -n "$p" ]; then
    kill -KILL "$p"
    wait_for 300 restarted_before_serving $j || { echo "# host 0's kvsrun did not restart its kvsd"; ok=0; }
else
    echo "# host 0's kvsd never started"; ok=0
fi
host 1 $j 120 --restarts 2
finish $j || ok=0
tap $((1 - ok)) "host 0's kvsd killed while it waits for host 1 to join: restarted (restart 1 of 2); the values of a run without faults"
