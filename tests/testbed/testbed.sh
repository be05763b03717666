#!/usr/bin/env bash
# testbed.sh: a multi-host test bed on one machine, made of network namespaces (issue 3, item 6).
#
#   testbed.sh up PREFIX [HOSTS]          make the bed (HOSTS defaults to 4)
#   testbed.sh rank-exec PREFIX -- prog args...
#                                         run prog in the host of rank $COLLIE_RANK (the program under collierun)
#   testbed.sh down PREFIX                remove everything the bed made (idempotent; quiet when nothing is there)
#   testbed.sh check                      exit 0 when a bed can be made here, else 77 with the reason on stderr
#
# The bed, for PREFIX P and HOSTS n:
#
#     P-h0 [tb0 10.213.0.1/24] ---veth--- [P-p0] \
#     P-h1 [tb0 10.213.0.2/24] ---veth--- [P-p1]  +-- bridge br0 in the switch namespace P-sw
#     ...                                         |
#     P-h{n-1} [tb0 10.213.0.n/24] ---veth--- [P-p{n-1}] /
#
# Each "host" is a network namespace P-hI with lo up and one interface, tb0, at 10.213.0.(I+1)/24 (the namespaces
# are new, so the subnet cannot collide with the machine's own). Its peer P-pI is a port of the bridge br0 in the
# switch namespace P-sw. Both ends of each link carry a tbf qdisc, so the link is rate-limited in both directions:
# hosts 0 and 1 at 10gbit, the others at 1gbit, or as TESTBED_RATES says ("10gbit 10gbit 1gbit 1gbit": one rate
# per host, the last one repeated). tbf's burst is TESTBED_BURST_MS (default 1) ms at the rate, at least 64 KiB (a
# GSO packet); its queue holds 20 ms more. A real port never sends faster than its rate, and a burst lets a bucket's
# worth pass at loopback speed: a long one (10 ms, the default before 2026-11-24) makes a size near it measure the
# bucket's state more than the algorithm, so it is kept short (1 ms still spares tbf from a late timer's loss).
# The tuner's kPortBurstSeconds (src/core/tuner.cpp) is fitted to this default.
# Nothing is made in the caller's own namespace: the veth pairs are created inside P-sw with their host ends moved
# straight into P-hI.
#
# rank-exec runs prog in P-h$((COLLIE_RANK % n)) with the environment kept (ip netns exec keeps it), so
#     COLLIE_ROOT_ADDR=10.213.0.1:29500 collierun -n 8 -- testbed.sh rank-exec P -- all_reduce_perf -b 8 -e 1M
# runs two ranks per host: shared memory between the two ranks of a host, TCP between hosts. TESTBED_RANK_HOSTS
# ("2 3") places rank r on host ${list[r % len]} instead; COLLIE_ROOT_ADDR must then name rank 0's host address.
#
# PREFIX: a letter, then up to 10 letters, digits or _ (so that "P-pNN" fits the 15 characters of an interface
# name); make it unique per run (e.g. tb$$) so that two beds at once cannot collide. Needs root (or CAP_SYS_ADMIN
# and CAP_NET_ADMIN) and iproute2 (ip, tc) with the veth, bridge and sch_tbf kernel modules.
set -euo pipefail

readonly kSubnet=10.213.0
readonly kDefaultHosts=4
readonly kMaxHosts=99
readonly kDefaultRates="10gbit 10gbit 1gbit 1gbit"

die() {
  echo "testbed.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

check_prefix() {
  [[ $1 =~ ^[A-Za-z][A-Za-z0-9_]{0,10}$ ]] ||
    die "prefix '$1': a letter, then up to 10 letters, digits or _ (an interface name has at most 15)"
}

# Prints the namespaces of bed $1, one per line.
bed_namespaces() {
  ip netns list 2>/dev/null | awk -v p="$1" '$1 ~ "^" p "-(h[0-9]+|sw)$" { print $1 }'
}

# Prints the number of host namespaces of bed $1.
bed_hosts() {
  ip netns list 2>/dev/null | awk -v p="$1" '$1 ~ "^" p "-h[0-9]+$" { n++ } END { print n + 0 }'
}

# Converts a tc rate ("10gbit", "500mbit", "1000000bit", "125mbps") to bits per second.
rate_bits() {
  local r=${1,,} num unit
  [[ $r =~ ^([0-9]+)([a-z]*)$ ]] || die "rate '$1': expected a number and a unit such as 10gbit or 500mbit"
  num=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]}
  case $unit in
    bit | "") echo "$num" ;;
    kbit) echo $((num * 1000)) ;;
    mbit) echo $((num * 1000000)) ;;
    gbit) echo $((num * 1000000000)) ;;
    bps) echo $((num * 8)) ;;
    kbps) echo $((num * 8000)) ;;
    mbps) echo $((num * 8000000)) ;;
    gbps) echo $((num * 8000000000)) ;;
    *) die "rate '$1': unknown unit '$unit' (bit, kbit, mbit, gbit, bps, kbps, mbps, gbps)" ;;
  esac
}

# Adds a tbf qdisc at rate $3 on device $2 in namespace $1.
add_tbf() {
  local ns=$1 dev=$2 rate=$3 bits burst limit ms=${TESTBED_BURST_MS:-1}
  [[ $ms =~ ^[1-9][0-9]*$ ]] || die "TESTBED_BURST_MS='$ms': expected a whole number of milliseconds, at least 1"
  bits=$(rate_bits "$rate")
  burst=$((bits / 8000 * ms))  # ms at the rate, in bytes
  ((burst >= 65536)) || burst=65536
  limit=$((burst + bits / 400))  # the burst plus 20 ms of queue
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" limit "$limit"
}

cmd_down() {
  local prefix=$1 ns pid dev
  check_prefix "$prefix"
  for ns in $(bed_namespaces "$prefix"); do
    # Whatever still runs in the bed (a rank left over from a failed run) would keep the namespace and its links
    # alive after the name is gone: end it first. These are the bed's own processes.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null || true
    done
    ip netns delete "$ns" 2>/dev/null || true
  done
  # Nothing is ever made in the caller's namespace; should a device named P-* be there anyway, it is the bed's.
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' -v p="$prefix" '{ sub(/@.*/, "", $2) } $2 ~ "^" p "-" { print $2 }'); do
    ip link delete "$dev" 2>/dev/null || true
  done
  return 0
}

cmd_up() {
  local prefix=$1 hosts=${2:-$kDefaultHosts} rates i ns rate sw
  check_prefix "$prefix"
  if ! [[ $hosts =~ ^[0-9]+$ ]] || ((hosts < 1 || hosts > kMaxHosts)); then die "HOSTS '$hosts': 1..$kMaxHosts"; fi
  [[ -z $(bed_namespaces "$prefix") ]] || die "a bed named $prefix exists already (testbed.sh down $prefix)"
  read -r -a rates <<<"${TESTBED_RATES:-$kDefaultRates}"
  ((${#rates[@]} > 0)) || die "TESTBED_RATES is empty"
  for rate in "${rates[@]}"; do rate_bits "$rate" >/dev/null; done

  # A half-made bed is removed before we report the failure.
  trap 'rc=$?; if ((rc)); then cmd_down "$prefix"; echo "testbed.sh: up $prefix failed; removed what was made" >&2; fi' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  sw="$prefix-sw"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 0; i < hosts; ++i)); do
    ns="$prefix-h$i"
    rate=${rates[i]:-${rates[${#rates[@]} - 1]}}
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "$prefix-p$i" type veth peer name tb0 netns "$ns"
    ip -n "$sw" link set "$prefix-p$i" master br0
    ip -n "$sw" link set "$prefix-p$i" up
    ip -n "$ns" addr add "$kSubnet.$((i + 1))/24" dev tb0
    ip -n "$ns" link set tb0 up
    add_tbf "$ns" tb0 "$rate"
    add_tbf "$sw" "$prefix-p$i" "$rate"
    echo "testbed: $ns tb0 $kSubnet.$((i + 1))/24 at $rate"
  done
  trap - EXIT INT TERM
}

cmd_rank_exec() {
  local prefix=$1 hosts rank host list
  shift
  check_prefix "$prefix"
  [[ ${1:-} == -- ]] && shift
  (($# > 0)) || usage
  rank=${COLLIE_RANK:-${RANK:-}}
  [[ $rank =~ ^[0-9]+$ ]] || die "rank-exec: COLLIE_RANK is not set (run it under collierun)"
  hosts=$(bed_hosts "$prefix")
  ((hosts > 0)) || die "rank-exec: no bed named $prefix (testbed.sh up $prefix)"
  if [[ -n ${TESTBED_RANK_HOSTS:-} ]]; then
    read -r -a list <<<"$TESTBED_RANK_HOSTS"
    host=${list[rank % ${#list[@]}]}
    if ! [[ $host =~ ^[0-9]+$ ]] || ((host >= hosts)); then
      die "rank-exec: TESTBED_RANK_HOSTS names host '$host'; the bed has hosts 0..$((hosts - 1))"
    fi
  else
    host=$((rank % hosts))
  fi
  exec ip netns exec "$prefix-h$host" "$@"
}

cmd_check() {
  local why="" ns="tbchk$$"
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    why="ip or tc not found (install iproute2)"
  elif [[ $(id -u) -ne 0 ]] && ! grep -qE '^CapEff:\s*[0-9a-f]*[2367abef][0-9a-f]{5}$' /proc/self/status; then
    why="not root and no CAP_SYS_ADMIN (uid $(id -u))"
  else
    # The only sure test is to try: a namespace, a bridge, a veth pair and a tbf qdisc, then remove them.
    local err
    if ! err=$({
      ip netns add "$ns" &&
        ip -n "$ns" link add br0 type bridge &&
        ip -n "$ns" link add name tbchka type veth peer name tbchkb &&
        tc -n "$ns" qdisc add dev tbchka root tbf rate 1gbit burst 1250000 limit 2500000
    } 2>&1); then
      why="cannot make a network namespace with a bridge, a veth pair and a tbf qdisc: ${err//$'\n'/; }"
    fi
    ip netns delete "$ns" 2>/dev/null || true
  fi
  if [[ -n $why ]]; then
    echo "testbed.sh: network namespaces not available here: $why" >&2
    exit 77
  fi
}

(($# > 0)) || usage
cmd=$1
shift
case $cmd in
  up) (($# >= 1 && $# <= 2)) || usage; cmd_up "$@" ;;
  down) (($# == 1)) || usage; cmd_down "$1" ;;
  rank-exec) (($# >= 2)) || usage; cmd_rank_exec "$@" ;;
  check) (($# == 0)) || usage; cmd_check ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
