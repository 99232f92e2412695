#!/usr/bin/env bash
# Several "hosts" on this machine, for running tidal across hosts without a cluster (docs/distributed.md,
# "Across hosts"): each host is a network namespace with an address on a switch of its own (a bridge in
# one more namespace), so MPI's traffic between them crosses a real network stack over TCP, never shared
# memory. Needs root (ip netns, from Debian's iproute2).
#
#   scripts/netns_hosts.sh up N [NAME]     make hosts NAME-0 … NAME-(N-1) at 10.231.0.1 … 10.231.0.N
#                                          (NAME: tidalhost); prints a hostfile for mpirun
#   scripts/netns_hosts.sh down [NAME]     end every process in those hosts and remove them
#   scripts/netns_hosts.sh link HOST up|down [NAME]  plug or pull host HOST's (a number) cable
#
# Then, as on a cluster with ssh, from inside host 0 (the agent enters a host's namespace where mpirun
# would ssh into it):
#   TIDAL_NETNS=NAME ip netns exec NAME-0 mpirun --allow-run-as-root --hostfile FILE -np 2 \
#     --mca plm_rsh_agent scripts/netns_agent.sh --mca btl tcp,self \
#     --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24 build/tidal train ...
set -euo pipefail

name_of() { echo "${1:-tidalhost}"; }

up() {
  local n="$1" name
  name="$(name_of "${2:-}")"
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 250)) || {
    echo "netns_hosts.sh: the number of hosts must be in [1, 250], got '$n'" >&2
    exit 2
  }
  if ip netns list | grep -q "^$name-sw\b"; then
    echo "netns_hosts.sh: hosts named $name exist already (scripts/netns_hosts.sh down $name removes them)" >&2
    exit 2
  fi
  ip netns add "$name-sw"
  ip -n "$name-sw" link add sw type bridge
  ip -n "$name-sw" link set sw up
  for ((i = 0; i < n; i++)); do
    local host="$name-$i"
    ip netns add "$host"
    # One end in the host (eth0), the other on the switch; names are per namespace, so they repeat.
    ip link add "$name-h$i" type veth peer name "$name-p$i"
    ip link set "$name-h$i" netns "$host" name eth0
    ip link set "$name-p$i" netns "$name-sw" name "p$i"
    ip -n "$name-sw" link set "p$i" master sw up
    ip -n "$host" addr add "10.231.0.$((i + 1))/24" dev eth0
    ip -n "$host" link set lo up
    ip -n "$host" link set eth0 up
    echo "10.231.0.$((i + 1)) slots=1"
  done
}

down() {
  local name ns
  name="$(name_of "${1:-}")"
  for ns in $(ip netns list | awk '{print $1}' | grep "^$name-" || true); do
    ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
}

link() {
  local name
  name="$(name_of "${3:-}")"
  ip -n "$name-$1" link set eth0 "$2"
}

case "${1:-}" in
  up) up "${2:-}" "${3:-}" ;;
  down) down "${2:-}" ;;
  link) link "${2:-}" "${3:-}" "${4:-}" ;;
  *)
    echo "usage: scripts/netns_hosts.sh up N [NAME] | down [NAME] | link HOST up|down [NAME]" >&2
    exit 2
    ;;
esac
