#!/usr/bin/env bash
# run_testbed_tests.sh: the CTest cases of the multi-host test bed (label testbed; see testbed.sh for the bed).
#
#   run_testbed_tests.sh CASE COLLIERUN PERF_DIR
#
# Each case makes its own bed of 4 hosts (prefix ctb<pid>, so runs at once cannot collide), runs collie across it
# and removes the bed in an EXIT trap, so also when a check fails or the case is stopped by SIGINT/SIGTERM. A bed
# left by a run that was SIGKILLed (ctb<pid> whose process is gone) is removed at the start of the next run.
# Exit 77 (CTest's skip) with the reason when namespaces cannot be made here. Cases:
#   collectives  every *_perf, 4 ranks on 4 hosts (TCP only), sizes 4 B..4 MiB, checked: exit 0, #wrong 0
#   algorithms   all_reduce_perf, 8 ranks, two per host (shm inside a host, TCP between), -A ring/tree/rhd/hier/auto;
#                the algo column of every row (what ran, per size) must be the forced algorithm
#   ifname       COLLIE_SOCKET_IFNAME unset, tb and =tb0 work and bind 10.213.0.x (collie's own log says so);
#                =nosuch0 fails on every rank, quickly, naming the variable
#   ratelimit    2-rank 64 MiB all_reduce: a 1gbit host pair stays under 0.14 GB/s, a 10gbit pair under 1.45 GB/s
#                and faster than the 1gbit pair
#   cleanup      a rank SIGKILLed mid-run, then down: no namespace or interface of the bed is left; the same after
#                a case that fails on purpose and after one stopped by SIGTERM (nested runs of this script)
#   ucx          collectives and the 8-rank all_reduce with COLLIE_NET=ucx (UCX over tcp on tb0): every row checked,
#                every rank's peers on other hosts over ucx (exit 77 where the UCX transport is not built)
#   deadpeer     3 ranks on 3 hosts in an endless AllReduce with COLLIE_TIMEOUT=inf; host 2's switch port goes down
#                (nothing is closed: the peer is unreachable, not gone): every rank fails within
#                COLLIE_PEER_DEAD_TIMEOUT (2 s) plus 2 s, and one names peer 2 dead or unreachable
#   unconnected  the same with a host whose peers are not connected yet when it goes: 4 ranks on 4 hosts initialise
#                (connections on first use leave each with a few), host 2's switch port goes down, then every rank
#                calls an AllToAll (first_contact.cpp, $TESTBED_FIRST_CONTACT), dialling the peers it lacks: every
#                rank fails within COLLIE_PEER_DEAD_TIMEOUT (2 s) plus 2 s, and one says a dial had no answer (before
#                the dial's own limit, a silent host was found only at COLLIE_TIMEOUT)
set -euo pipefail

usage() {
  echo "usage: $0 collectives|algorithms|ifname|ratelimit|cleanup|deadpeer|unconnected|ucx COLLIERUN PERF_DIR" >&2
  exit 2
}
(($# == 3)) || usage
case_name=$1
collierun=$2
perf_dir=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tb="$here/testbed.sh"
readonly root_port=29500
readonly subnet=10.213.0

failures=0
ok() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# ---- The bed ----------------------------------------------------------------------------------------------------

# Beds of runs that were SIGKILLed (CTest's timeout) cannot clean up after themselves: remove those whose pid is gone.
remove_stale_beds() {
  local p pid
  for p in $(ip netns list 2>/dev/null | sed -nE 's/^(ctb[0-9]+[a-z]?)-(h[0-9]+|sw)( .*)?$/\1/p' | sort -u); do
    pid=${p#ctb}
    pid=${pid%[a-z]}
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "removing the stale bed $p (its run, pid $pid, is gone)"
      "$tb" down "$p"
    fi
  done
}

# What the cases set is all they get: no COLLIE_* variable of the caller's (an interface filter, an algorithm...),
# and the bed's default rates and rank placement.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^COLLIE_' || true)
unset TESTBED_RATES TESTBED_RANK_HOSTS

rc=0
"$tb" check || rc=$?
((rc == 0)) || exit "$rc"  # 77 (skip) with the reason on stderr
for f in "$collierun" "$perf_dir/all_reduce_perf"; do [[ -x $f ]] || { echo "not built: $f" >&2; exit 2; }; done

prefix=${TESTBED_PREFIX:-ctb$$}
work=$(mktemp -d "${TMPDIR:-/tmp}/testbed.XXXXXX")
finish() {
  local rc=$?
  "$tb" down "$prefix"
  rm -rf "$work"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
remove_stale_beds
"$tb" up "$prefix"

# ---- Running jobs -----------------------------------------------------------------------------------------------

# job NAME NRANKS ROOT_HOST prog args...: collierun with one rank per host in turn (TESTBED_RANK_HOSTS, if set, says
# which hosts), the bootstrap root on ROOT_HOST; output in $work/NAME.out, exit code in job_rc, wall time in job_s.
job_rc=0
job_s=0
job() {
  local name=$1 n=$2 root_host=$3 start
  shift 3
  echo "run: $name: collierun -n $n -- testbed.sh rank-exec $prefix -- $(basename "$1") ${*:2}"
  start=$(date +%s.%N)
  job_rc=0
  # In the background, so that a SIGTERM to us is handled at once (bash runs traps only between commands).
  COLLIE_ROOT_ADDR="$subnet.$((root_host + 1)):$root_port" COLLIE_TIMEOUT=${COLLIE_TIMEOUT:-30000} \
    "$collierun" -n "$n" --timeout 60 -- "$tb" rank-exec "$prefix" -- "$@" >"$work/$name.out" 2>&1 &
  wait $! || job_rc=$?
  job_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

show() { sed 's/^/    /' "$work/$1.out"; }

# check_perf NAME ROWS: the job exited 0, rank 0's table has ROWS rows, every #wrong column reads 0 (or N/A for an
# in-place column the collective does not have) and the summary says OK.
check_perf() {
  local name=$1 rows=$2 got bad
  got=$(awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { n++ } END { print n + 0 }' "$work/$name.out")
  bad=$(awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ && ($10 != "0" || ($14 != "0" && $14 != "N/A")) { n++ } END { print n + 0 }' \
    "$work/$name.out")
  if ((job_rc != 0)); then
    fail "$name: exit code $job_rc"
  elif ((got != rows)); then
    fail "$name: $got table rows, expected $rows"
  elif ((bad != 0)); then
    fail "$name: $bad rows with a non-zero #wrong"
  elif ! grep -q '^\[0\] # Out of bounds values : 0 OK' "$work/$name.out"; then
    fail "$name: no 'Out of bounds values : 0 OK' summary"
  else
    ok "$name: exit 0, $rows sizes, #wrong 0 in every row ($job_s s)"
    return 0
  fi
  show "$name"
  return 1
}

# check_algo_column NAME ALGO: the algo column (the algorithm the communicator ran, per size) of every table row is
# ALGO, or for auto one of the algorithms; not what the tool echoes of its -A argument.
check_algo_column() {
  local name=$1 want=$2 got bad
  got=$(awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $15 }' "$work/$name.out" | sort | uniq -c | sed 's/^ *//' |
    tr '\n' ',' | sed 's/,$//')
  if [[ $want == auto ]]; then
    bad=$(awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ && $15 !~ /^(ring|tree|rhd|direct|hier)$/ { n++ } END { print n + 0 }' \
      "$work/$name.out")
  else
    bad=$(awk -v a="$want" '$1 == "[0]" && $2 ~ /^[0-9]+$/ && $15 != a { n++ } END { print n + 0 }' "$work/$name.out")
  fi
  if ((bad == 0)); then
    ok "$name: algo column per size: $got"
  else
    fail "$name: $bad rows whose algo column is not ${want/auto/ring, tree, rhd, direct or hier} (got: $got)"
  fi
}

# check_transports NAME NRANKS SHM TCP: collie's INIT log of every rank ("connected K peer(s) over T (...)", one line
# per connect step) adds up to SHM peers over shm and TCP peers over tcp, i.e. the ranks sit on the hosts rank-exec
# meant (every pair is connected at init: these jobs run with COLLIE_CONNECT=eager).
peers_over() {  # NAME RANK TRANSPORT: the peers that rank connected over that transport, summed over its log lines
  awk -v r="$2" -v t="$3" '$1 == "[" r "]" && $0 ~ (" comm rank " r ": connected [0-9]+ peer\\(s\\) over " t " \\(") {
    for (i = 1; i < NF; ++i) if ($i == "connected") { sum += $(i + 1); break }
  } END { print sum + 0 }' "$work/$1.out"
}
check_transports() {
  local name=$1 n=$2 shm=$3 tcp=$4 net=${5:-tcp} r bad=0
  for ((r = 0; r < n; ++r)); do
    [ "$(peers_over "$name" "$r" shm)" = "$shm" ] || bad=$((bad + 1))
    [ "$(peers_over "$name" "$r" "$net")" = "$tcp" ] || bad=$((bad + 1))
  done
  if ((bad == 0)); then
    ok "$name: every rank: $shm peer(s) over shm, $tcp over $net"
  else
    fail "$name: $bad of $((2 * n)) transport counts are not $shm over shm and $tcp over $net"
    grep ' peer(s) over ' "$work/$name.out" | sed 's/^/    /' || true
  fi
}

# algbw NAME: the larger of rank 0's out-of-place and in-place algbw (GB/s) in the first table row.
algbw() {
  awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { a = $8 + 0; b = ($12 == "N/A") ? 0 : $12 + 0; print (a > b ? a : b); exit }' \
    "$work/$1.out"
}

# ---- The cases --------------------------------------------------------------------------------------------------

readonly sweep=(-b 4 -e 4M -f 4 -c 1 -w 1 -n 3)
readonly sweep_rows=11  # 4 B, 16 B, ..., 4 MiB

case_collectives() {
  local c
  for c in all_reduce all_gather broadcast reduce reduce_scatter alltoall sendrecv; do
    COLLIE_CONNECT=eager COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=INIT job "${c}_4hosts" 4 0 "$perf_dir/${c}_perf" "${sweep[@]}"
    if check_perf "${c}_4hosts" "$sweep_rows"; then check_transports "${c}_4hosts" 4 0 3; fi
  done
}

# The UCX transport between hosts (COLLIE_NET=ucx, UCX over its tcp on the bed's interface): every *_perf with 4
# ranks on 4 hosts, and all_reduce_perf with 8 ranks, two per host (shm inside a host, ucx between).
case_ucx() {
  local c
  if [[ ! -x $perf_dir/../tools/collie-info ]] || ! "$perf_dir/../tools/collie-info" --ucx | grep -q 'built  *yes'; then
    echo "the UCX transport is not built"
    exit 77
  fi
  export COLLIE_NET=ucx UCX_TLS=tcp UCX_NET_DEVICES=tb0
  for c in all_reduce all_gather broadcast reduce reduce_scatter alltoall sendrecv; do
    COLLIE_CONNECT=eager COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=INIT job "${c}_4hosts_ucx" 4 0 "$perf_dir/${c}_perf" "${sweep[@]}"
    if check_perf "${c}_4hosts_ucx" "$sweep_rows"; then check_transports "${c}_4hosts_ucx" 4 0 3 ucx; fi
  done
  COLLIE_CONNECT=eager COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=INIT job all_reduce_8ranks_ucx 8 0 "$perf_dir/all_reduce_perf" "${sweep[@]}"
  if check_perf all_reduce_8ranks_ucx "$sweep_rows"; then check_transports all_reduce_8ranks_ucx 8 1 6 ucx; fi
}

case_algorithms() {
  local a name
  for a in ring tree rhd hier auto; do
    name="all_reduce_8ranks_$a"
    COLLIE_CONNECT=eager COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=INIT job "$name" 8 0 "$perf_dir/all_reduce_perf" "${sweep[@]}" -A "$a"
    check_perf "$name" "$sweep_rows" || continue
    check_algo_column "$name" "$a"
    # Two ranks per host: each rank has its host mate over shm and the 6 ranks of the other hosts over tcp.
    check_transports "$name" 8 1 6
  done
}

case_ifname() {
  local filter name r addr n start elapsed rc secret pids=()
  # Unset (first non-loopback interface), a prefix and an exact name: each rank must bind its own host's address.
  for filter in unset tb =tb0; do
    name="ifname_${filter#=}"
    [[ $filter == =* ]] && name="ifname_exact_${filter#=}"
    if [[ $filter == unset ]]; then
      COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=NET job "$name" 4 0 "$perf_dir/all_reduce_perf" -b 1M -e 1M -c 1 -w 1 -n 2
    else
      COLLIE_SOCKET_IFNAME=$filter COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=NET \
        job "$name" 4 0 "$perf_dir/all_reduce_perf" -b 1M -e 1M -c 1 -w 1 -n 2
    fi
    check_perf "$name" 1 || continue
    n=0
    for r in 0 1 2 3; do
      addr="$subnet.$((r + 1))"
      if grep -qE "^\[$r\] .* collie INFO using interface tb0 address ${addr//./\\.}:0\$" "$work/$name.out" &&
        grep -qE "^\[$r\] .* collie INFO tcp: rank $r listening on ${addr//./\\.}:[0-9]+\$" "$work/$name.out"; then
        n=$((n + 1))
      else
        fail "$name: rank $r's log does not say 'using interface tb0 address $addr' and 'listening on $addr:PORT'"
      fi
    done
    if grep -qE 'collie INFO (using interface lo |tcp: rank [0-9]+ listening on 127\.)' "$work/$name.out"; then
      fail "$name: a rank used loopback"
      n=0
    fi
    if ((n == 4)); then
      ok "$name: COLLIE_SOCKET_IFNAME $filter: every rank bound tb0 at its host's $subnet.x address, none loopback"
    else
      grep -E 'using interface|listening on' "$work/$name.out" | sed 's/^/    /' || true
    fi
  done

  # A name that matches nothing: every rank must fail on its own (so no collierun, which stops the others after the
  # first failure), well within COLLIE_TIMEOUT, naming the variable.
  echo "run: ifname_nosuch0: 4 ranks started by hand, COLLIE_SOCKET_IFNAME==nosuch0 COLLIE_TIMEOUT=5000"
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  start=$(date +%s)
  for r in 0 1 2 3; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u COLLIE_UNIQUE_ID \
      COLLIE_RANK=$r COLLIE_NRANKS=4 COLLIE_LOCAL_RANK=0 COLLIE_ROOT_ADDR="$subnet.1:$root_port" COLLIE_SECRET="$secret" \
      COLLIE_TIMEOUT=5000 COLLIE_SOCKET_IFNAME==nosuch0 \
      timeout 30 "$tb" rank-exec "$prefix" -- "$perf_dir/all_reduce_perf" -b 8 -e 8 >"$work/nosuch0.$r.out" 2>&1 &
    pids+=($!)
  done
  n=0
  for r in 0 1 2 3; do
    rc=0
    wait "${pids[r]}" || rc=$?
    if ((rc == 0)); then
      fail "ifname_nosuch0: rank $r exited 0"
    elif ((rc == 124)); then
      fail "ifname_nosuch0: rank $r still ran after 30 s"
    elif ! grep -q "COLLIE_SOCKET_IFNAME='=nosuch0'" "$work/nosuch0.$r.out"; then
      fail "ifname_nosuch0: rank $r (exit $rc) did not name COLLIE_SOCKET_IFNAME='=nosuch0':"
      sed 's/^/    /' "$work/nosuch0.$r.out"
    else
      n=$((n + 1))
    fi
  done
  elapsed=$(($(date +%s) - start))
  if ((n == 4 && elapsed <= 20)); then
    ok "ifname_nosuch0: all 4 ranks failed in ${elapsed} s, each saying: $(grep -ho 'no usable network interface[^(]*([^)]*)' \
      "$work/nosuch0.0.out" | head -1)"
  elif ((n == 4)); then
    fail "ifname_nosuch0: the ranks took $elapsed s to fail (at most 20 expected)"
  fi
}

case_ratelimit() {
  local slow fast i names=(ratelimit_1gbit ratelimit_10gbit) rcs=() args=(-b 64M -e 64M -c 0 -w 1 -n 2)
  # Hosts 2 and 3 have 1gbit links, hosts 0 and 1 10gbit (testbed.sh's default rates). A 2-rank AllReduce moves the
  # whole buffer each way, so algbw cannot exceed the link rate: 0.125 GB/s at 1gbit, 1.25 GB/s at 10gbit. Only
  # these ceilings (plus a margin for tbf's burst) are asserted, and that the 10gbit pair beats the 1gbit one.
  TESTBED_RANK_HOSTS="2 3" job ratelimit_1gbit 2 2 "$perf_dir/all_reduce_perf" "${args[@]}"
  rcs+=("$job_rc")
  TESTBED_RANK_HOSTS="0 1" job ratelimit_10gbit 2 0 "$perf_dir/all_reduce_perf" "${args[@]}"
  rcs+=("$job_rc")
  for i in 0 1; do
    if ((rcs[i] != 0)) || [[ -z $(algbw "${names[i]}") ]]; then
      fail "${names[i]}: the job exited ${rcs[i]} or printed no table row"
      show "${names[i]}"
      return 0
    fi
  done
  slow=$(algbw ratelimit_1gbit)
  fast=$(algbw ratelimit_10gbit)
  if awk -v s="$slow" 'BEGIN { exit !(s < 0.14) }'; then
    ok "ratelimit: 1gbit pair (hosts 2, 3): algbw $slow GB/s < 0.14"
  else
    fail "ratelimit: 1gbit pair (hosts 2, 3): algbw $slow GB/s, not under 0.14: the rate limit does not bite"
  fi
  if awk -v f="$fast" 'BEGIN { exit !(f < 1.45) }'; then
    ok "ratelimit: 10gbit pair (hosts 0, 1): algbw $fast GB/s < 1.45"
  else
    fail "ratelimit: 10gbit pair (hosts 0, 1): algbw $fast GB/s, not under 1.45: the rate limit does not bite"
  fi
  if awk -v s="$slow" -v f="$fast" 'BEGIN { exit !(f > s) }'; then
    ok "ratelimit: the 10gbit pair ($fast GB/s) is faster than the 1gbit pair ($slow GB/s)"
  else
    fail "ratelimit: the 10gbit pair ($fast GB/s) is not faster than the 1gbit pair ($slow GB/s)"
  fi
}

# leftovers P: prints what of bed P is still there (namespaces, interfaces in our namespace), nothing if none.
leftovers() {
  ip netns list | awk -v p="$1" 'index($1, p "-") == 1 { print "namespace " $1 }'
  ip -o link show | awk -F': ' -v p="$1" 'index($2, p "-") == 1 { print "interface " $2 }'
}

# expect_gone P WHAT: asserts that nothing of bed P is left.
expect_gone() {
  local left
  left=$(leftovers "$1")
  if [[ -z $left ]]; then
    ok "$2: no namespace or interface named $1-* is left"
  else
    fail "$2: left behind: $(echo "$left" | tr '\n' ' ')"
  fi
}

case_cleanup() {
  local pid="" i rc out sub
  # The bed is all there before anything is removed.
  local ns ports
  ns=$(ip netns list | awk -v p="$prefix" 'index($1, p "-") == 1' | wc -l)
  ports=$(ip -n "$prefix-sw" -o link show master br0 | wc -l)
  if ((ns == 5 && ports == 4)); then ok "cleanup: the bed has 5 namespaces and 4 bridge ports"; else
    fail "cleanup: the bed has $ns namespaces (5 expected) and $ports bridge ports (4 expected)"
  fi

  # 1. A rank SIGKILLed in the middle of a job: collierun must say so and fail; down must leave nothing.
  echo "run: cleanup_kill: 4-rank all_reduce_perf at 64 MiB; rank 2 (host 2) gets SIGKILL"
  COLLIE_ROOT_ADDR="$subnet.1:$root_port" COLLIE_TIMEOUT=10000 "$collierun" -n 4 --timeout 60 -- \
    "$tb" rank-exec "$prefix" -- "$perf_dir/all_reduce_perf" -b 64M -e 64M -c 0 -w 1 -n 50 >"$work/kill.out" 2>&1 &
  local job_pid=$!
  for ((i = 0; i < 100; ++i)); do  # up to 10 s for rank 2 to start and reach its first AllReduce
    pid=$(ip netns pids "$prefix-h2" 2>/dev/null | head -1)
    [[ -n $pid ]] && grep -q '^\[0\] #  Rank  3' "$work/kill.out" && break
    pid=""
    sleep 0.1
  done
  if [[ -z $pid ]]; then
    fail "cleanup_kill: rank 2 never ran in $prefix-h2"
    kill "$job_pid" 2>/dev/null || true
  else
    sleep 0.5
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rc=0
  wait "$job_pid" || rc=$?
  if [[ -n $pid ]]; then
    if ((rc != 0 && rc != 124)) && grep -q 'collierun: rank 2 killed by signal SIGKILL' "$work/kill.out"; then
      ok "cleanup_kill: collierun exited $rc naming rank 2 killed by SIGKILL"
    else
      fail "cleanup_kill: collierun exited $rc without naming rank 2's SIGKILL"
      tail -20 "$work/kill.out" | sed 's/^/    /'
    fi
  fi
  "$tb" down "$prefix"
  expect_gone "$prefix" "cleanup_kill: after down"
  rc=0
  out=$("$tb" down "$prefix" 2>&1) || rc=$?
  if ((rc == 0)) && [[ -z $out ]]; then ok "cleanup: a second down is quiet and exits 0"; else
    fail "cleanup: a second down exited $rc, saying '$out'"
  fi

  # 2. A case that fails on purpose (a nested run of this script): its EXIT trap must remove its bed.
  sub="${prefix}f"
  echo "run: cleanup_fail: a nested case that fails on purpose, bed $sub"
  rc=0
  TESTBED_PREFIX=$sub "$0" _fail_on_purpose "$collierun" "$perf_dir" >"$work/fail.out" 2>&1 || rc=$?
  if ((rc != 0)) && grep -q 'failing on purpose' "$work/fail.out" && grep -q "^ok: the bed $sub is up" "$work/fail.out"
  then
    ok "cleanup_fail: the nested case made its bed and failed (exit $rc)"
  else
    fail "cleanup_fail: the nested case exited $rc:"
    sed 's/^/    /' "$work/fail.out"
  fi
  expect_gone "$sub" "cleanup_fail: after the failed case"

  # 3. A case stopped by SIGTERM while it waits (as a timeout would stop it): the same.
  sub="${prefix}t"
  echo "run: cleanup_term: a nested case stopped by SIGTERM, bed $sub"
  TESTBED_PREFIX=$sub "$0" _wait_for_term "$collierun" "$perf_dir" >"$work/term.out" 2>&1 &
  local sub_pid=$!
  for ((i = 0; i < 100; ++i)); do
    grep -q 'waiting for SIGTERM' "$work/term.out" 2>/dev/null && break
    sleep 0.1
  done
  kill -TERM "$sub_pid"
  rc=0
  wait "$sub_pid" || rc=$?
  if ((rc == 143)); then ok "cleanup_term: the nested case exited 143 on SIGTERM"; else
    fail "cleanup_term: the nested case exited $rc (143 expected):"
    sed 's/^/    /' "$work/term.out"
  fi
  expect_gone "$sub" "cleanup_term: after SIGTERM"
}

# await_failures CASE STEM NRANKS DOWN LIMIT_MS PATTERN RC: waits for the ranks started as ${pids[@]} (output in
# $work/STEM.R.out, end time in $work/STEM.R.end) and checks that each exited with RC (any: anything but 0 and
# timeout's 124) within LIMIT_MS + 2000 ms of DOWN. Sets n (ranks that did), slowest (ms) and named (ranks whose
# output has PATTERN).
await_failures() {
  local name=$1 stem=$2 ranks=$3 down=$4 limit_ms=$5 pattern=$6 want=$7 r rc end ms
  n=0 named=0 slowest=0
  for ((r = 0; r < ranks; ++r)); do
    rc=0
    wait "${pids[r]}" || rc=$?
    end=$(cat "$work/$stem.$r.end" 2>/dev/null || echo 0)
    ms=$(awk -v a="$down" -v b="$end" 'BEGIN { printf "%d", (b - a) * 1000 }')
    grep -q "$pattern" "$work/$stem.$r.out" && named=$((named + 1))
    if { [[ $want == any ]] && ((rc == 0 || rc == 124)); } || { [[ $want != any ]] && ((rc != want)); } ||
      ((ms < 0 || ms > limit_ms + 2000)); then
      fail "$name: rank $r exited $rc ${ms} ms after host 2's link went down (expected an error within $((limit_ms + 2000)) ms)"
      sed 's/^/    /' "$work/$stem.$r.out" | tail -5
    else
      n=$((n + 1))
      ((ms > slowest)) && slowest=$ms
      echo "$name: rank $r failed ${ms} ms after the link went down: $(grep -ho 'failed: .*' "$work/$stem.$r.out" | head -1)"
    fi
  done
}

# The dead-peer cases' globals: the ranks' pids, and what await_failures found.
pids=()
n=0 named=0 slowest=0

case_deadpeer() {
  local r secret down
  readonly dead_ms=2000
  # Ranks started by hand, one per host (no collierun: it would stop the others after the first failure), each
  # stamping the time it ended; rank-exec puts rank r on host r.
  echo "run: deadpeer: 3 ranks, all_reduce_perf 1 MiB without end, COLLIE_TIMEOUT=inf COLLIE_PEER_DEAD_TIMEOUT=$dead_ms"
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  for r in 0 1 2; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u COLLIE_UNIQUE_ID \
      COLLIE_RANK=$r COLLIE_NRANKS=3 COLLIE_LOCAL_RANK=0 COLLIE_ROOT_ADDR="$subnet.1:$root_port" COLLIE_SECRET="$secret" \
      COLLIE_TIMEOUT=inf COLLIE_PEER_DEAD_TIMEOUT=$dead_ms \
      bash -c '"$@"; rc=$?; date +%s.%N >"$0.end"; exit $rc' "$work/dead.$r" \
      timeout 60 "$tb" rank-exec "$prefix" -- "$perf_dir/all_reduce_perf" -b 1M -e 1M -c 0 -w 1 -n 100000000 \
      >"$work/dead.$r.out" 2>&1 &
    pids+=($!)
  done
  for ((n = 0; n < 200; ++n)); do  # up to 20 s for the ranks to connect and start the endless AllReduce
    grep -q '^#  Rank  2' "$work/dead.0.out" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  down=$(date +%s.%N)
  ip -n "$prefix-sw" link set "$prefix-p2" down
  await_failures deadpeer dead 3 "$down" "$dead_ms" 'peer 2 is dead or unreachable' any
  ip -n "$prefix-sw" link set "$prefix-p2" up
  if ((n == 3 && named >= 1)); then
    ok "deadpeer: every rank failed within ${slowest} ms of host 2 going unreachable (COLLIE_PEER_DEAD_TIMEOUT=$dead_ms, COLLIE_TIMEOUT=inf); $named named peer 2 dead or unreachable"
  elif ((named == 0)); then
    fail "deadpeer: no rank said 'peer 2 is dead or unreachable'"
  fi
}

case_unconnected() {
  local r secret down ready
  readonly dead_ms=2000
  local prog=${TESTBED_FIRST_CONTACT:-}
  [[ -x $prog ]] || { fail "unconnected: TESTBED_FIRST_CONTACT names no program ('$prog')"; return; }
  echo "run: unconnected: 4 ranks, first_contact (AllToAll after host 2 goes down), COLLIE_TIMEOUT=inf COLLIE_PEER_DEAD_TIMEOUT=$dead_ms"
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  for r in 0 1 2 3; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u COLLIE_UNIQUE_ID \
      COLLIE_RANK=$r COLLIE_NRANKS=4 COLLIE_LOCAL_RANK=0 COLLIE_ROOT_ADDR="$subnet.1:$root_port" COLLIE_SECRET="$secret" \
      COLLIE_TIMEOUT=inf COLLIE_PEER_DEAD_TIMEOUT=$dead_ms \
      bash -c '"$@"; rc=$?; date +%s.%N >"$0.end"; exit $rc' "$work/first.$r" \
      timeout 60 "$tb" rank-exec "$prefix" -- "$prog" "$work/go" >"$work/first.$r.out" 2>&1 &
    pids+=($!)
  done
  for ((n = 0; n < 200; ++n)); do  # up to 20 s for the four ranks to initialise
    ready=$(cat "$work"/first.?.out 2>/dev/null | grep -c 'initialised' || true)
    ((ready == 4)) && break
    sleep 0.1
  done
  grep -h 'initialised' "$work"/first.?.out | sed 's/^/    /'
  down=$(date +%s.%N)
  ip -n "$prefix-sw" link set "$prefix-p2" down
  touch "$work/go"
  await_failures unconnected first 4 "$down" "$dead_ms" 'no answer to a connection' 1
  ip -n "$prefix-sw" link set "$prefix-p2" up
  if ((n == 4 && named >= 1)); then
    ok "unconnected: every rank failed within ${slowest} ms of host 2 going unreachable before its peers had connected to it (COLLIE_PEER_DEAD_TIMEOUT=$dead_ms, COLLIE_TIMEOUT=inf); $named said a dial had no answer"
  elif ((named == 0)); then
    fail "unconnected: no rank said 'no answer to a connection'"
  fi
}

# Nested cases for case_cleanup: both leave their bed to the EXIT trap.
case__fail_on_purpose() {
  [[ -n $(ip netns list | awk -v p="$prefix-h3" '$1 == p') ]] && ok "the bed $prefix is up"
  echo "failing on purpose"
  return 1
}
case__wait_for_term() {
  local sleeper
  sleep 60 &
  sleeper=$!
  trap 'kill "$sleeper"; exit 143' TERM
  echo "waiting for SIGTERM"
  wait "$sleeper"
}

case $case_name in
  collectives | algorithms | ifname | ratelimit | cleanup | deadpeer | unconnected | ucx | _fail_on_purpose | _wait_for_term)
    "case_$case_name" ;;
  *) usage ;;
esac
if ((failures)); then
  echo "$case_name: $failures check(s) FAILED"
  exit 1
fi
echo "$case_name: all checks passed"
