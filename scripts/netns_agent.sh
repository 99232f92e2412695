#!/bin/sh
# mpirun's launcher agent for the hosts of scripts/netns_hosts.sh, in ssh's place
# (--mca plm_rsh_agent scripts/netns_agent.sh): called as `netns_agent.sh HOST COMMAND...`, it runs COMMAND
# (Open MPI's daemon, orted) in the namespace of the host that has address HOST, as ssh would run it on
# that machine. TIDAL_NETNS names the set of hosts (scripts/netns_hosts.sh's NAME; default tidalhost).
set -eu
host="$1"
shift
name="${TIDAL_NETNS:-tidalhost}"
for ns in $(ip netns list | awk '{print $1}' | grep "^$name-[0-9]*$"); do
  if ip -n "$ns" -4 addr show dev eth0 | grep -q "inet $host/"; then
    exec ip netns exec "$ns" /bin/sh -c "$*"
  fi
done
echo "netns_agent.sh: no host of '$name' has address $host (scripts/netns_hosts.sh up N $name makes them)" >&2
exit 255
