#!/bin/bash
#
# test/lib/cluster.sh
#
# A throwaway Redis Cluster for test/check.sh: MASTERS masters with
# REPLICAS replicas each, on loopback, made with "redis-cli --cluster
# create" the way test/perl/RLCluster.pm makes the TAP suites' cluster,
# and ready once every node reports cluster_state:ok, all agree on the
# slot map and every replica is in sync.  Replicas cost no start-up time
# (3+0 and 3+3 nodes both take 2.1 s here, nearly all of it the cluster
# handshake), so the pass runs on a cluster shaped like a real one.
#
# Source test/lib/servers.sh first, then:
#   rl_start_cluster NAME MASTERS REPLICAS
#                                    start the nodes, create the cluster;
#                                    sets RL_CLUSTER_SEEDS ("h:p,h:p,...",
#                                    every node)
#   rl_cluster_script_calls          "port=N ...": scripts each node ran
#   rl_stop_cluster NAME             stop its nodes (rl_stop_all does too)
#
# The nodes are ordinary rl_start_redis servers, so rl_stop_all (on exit)
# stops them like the others.  Data ports come from 16500-16549, the TAP
# suites' block (RLCluster.pm): the pass is over before they start.  The
# cluster bus of the node on port P listens on P+50, as in RLCluster.pm.

RL_CLUSTER_SEEDS=
RL_CLUSTER_PORTS=()

# The first run of COUNT data ports in 16500-16549 whose bus ports are
# free too.
rl_cluster_ports() {
	local count=$1 base p ok
	for base in $(seq 16500 $((16550 - count))); do
		ok=1
		for p in $(seq "$base" $((base + count - 1))); do
			if ! rl_port_free "$p" || ! rl_port_free $((p + 50)); then
				ok=0
				break
			fi
		done
		if [ "$ok" = 1 ]; then
			echo "$base"
			return 0
		fi
	done
	echo "no free run of $count ports in 16500-16549" >&2
	return 1
}

# True once every node says cluster_state:ok and all of them report the
# same CLUSTER SLOTS (no node still learning the map from the bus).
rl_cluster_ok() {
	local p maps=() first
	for p in "${RL_CLUSTER_PORTS[@]}"; do
		"$RL_CLI" -p "$p" CLUSTER INFO 2>/dev/null |
			grep -q '^cluster_state:ok' || return 1
		maps+=("$("$RL_CLI" -p "$p" CLUSTER SLOTS 2>/dev/null | paste -sd ' ')")
	done
	first=${maps[0]}
	for p in "${maps[@]}"; do
		[ "$p" = "$first" ] || return 1
	done
	for p in "${RL_CLUSTER_PORTS[@]}"; do
		"$RL_CLI" -p "$p" INFO replication 2>/dev/null | grep -q '^role:slave' || continue
		"$RL_CLI" -p "$p" INFO replication 2>/dev/null |
			grep -q '^master_link_status:up' || return 1
	done
	return 0
}

rl_start_cluster() {
	local name=$1 masters=$2 replicas=$3 base i port addrs=()
	local count=$((masters * (1 + replicas)))
	base=$(rl_cluster_ports "$count") || return 1
	RL_CLUSTER_PORTS=()
	for i in $(seq 0 $((count - 1))); do
		port=$((base + i))
		rl_start_redis "$name$i" "$port" \
			--cluster-enabled yes \
			--cluster-port $((port + 50)) \
			--cluster-config-file nodes.conf \
			--cluster-node-timeout 1000 \
			--repl-diskless-sync-delay 0 || return 1
		RL_CLUSTER_PORTS+=("$port")
		addrs+=("127.0.0.1:$port")
	done
	"$RL_CLI" --cluster create "${addrs[@]}" --cluster-replicas "$replicas" \
		--cluster-yes </dev/null >"$RL_TMP/redis-$name-create.log" 2>&1 || {
		cat "$RL_TMP/redis-$name-create.log" >&2
		return 1
	}
	for _ in $(seq 300); do
		if rl_cluster_ok; then
			RL_CLUSTER_SEEDS=$(IFS=,; echo "${addrs[*]}")
			return 0
		fi
		sleep 0.1
	done
	echo "cluster $name not ok after 30 s" >&2
	return 1
}

# "port=N ..." for every node: the checks it ran (INFO commandstats:
# FCALL, EVALSHA, EVAL), which shows how the work spread over the masters
# (replicas show 0).
rl_cluster_script_calls() {
	local p n out=()
	for p in "${RL_CLUSTER_PORTS[@]}"; do
		n=$("$RL_CLI" -p "$p" INFO commandstats 2>/dev/null |
			awk -F '[=,]' '/^cmdstat_(fcall|evalsha|eval):/ { s += $2 } END { print s + 0 }')
		out+=("$p=$n")
	done
	echo "${out[*]}"
}

# Every node is sent SIGTERM at once, then waited for: a node takes one
# to two seconds to exit, so one by one would cost about 12 s for six.
rl_stop_cluster() {
	local name=$1 i f p alive pids=()
	for i in "${!RL_CLUSTER_PORTS[@]}"; do
		f=$RL_TMP/redis-$name$i/redis.pid
		[ -f "$f" ] && pids+=("$(cat "$f")")
	done
	[ ${#pids[@]} -gt 0 ] && kill -CONT "${pids[@]}" 2>/dev/null
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	for _ in $(seq 100); do
		alive=0
		for p in "${pids[@]}"; do
			kill -0 "$p" 2>/dev/null && alive=1
		done
		[ "$alive" = 0 ] && break
		sleep 0.1
	done
	for i in "${!RL_CLUSTER_PORTS[@]}"; do
		rm -f "$RL_TMP/redis-$name$i/redis.pid"
	done
	RL_CLUSTER_PORTS=()
	RL_CLUSTER_SEEDS=
}
