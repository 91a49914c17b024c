/*-------------------------------------------------------------------------
 *
 * rl_conn.c
 *	  Readying a backend's Redis nodes for a call: the top of the link.
 *
 * Each call starts here (rl_conn_begin): new settings (endpoint, mode,
 * credentials) forget every node and both topologies; settings that
 * cannot work together are recorded as a configuration error; in
 * sentinel mode the Sentinels are asked for the master when it is due
 * (rl_sentinel.c).  rl_node_ready opens a node's link when it has none
 * (rl_connect.c) and has a master the Sentinels named confirm its role.
 * rl_status()'s endpoint names the topology (rl_conn_status_endpoint).
 *
 * The files of redis/, bottom first, each calling only the ones below it
 * (test/layers.sh's ORDER checks it): rl_link.c (the bytes), rl_node.c
 * (the nodes, the current node and its failures), rl_roundtrip.c (round
 * trips), rl_connect.c (opening a link), rl_cluster.c and rl_sentinel.c
 * (the topologies, which call neither each other), this file, then
 * rl_scripts.c (the script calls) and rl_redis.c (the store's
 * operations).  Where a lower file must tell a higher one something, it
 * keeps a record the higher one reads: a failed node makes the slot map
 * or the master stale through rl_node.c's failure count.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rl_cluster.h"
#include "rl_node.h"
#include "rl_sentinel.h"

/*
 * The rl_settings_generation the open connections (or the last attempt)
 * were made under; 0 before the first call.
 */
static uint64 rl_conn_generation = 0;

/*
 * A standalone server asked for TLS over a Unix socket: a configuration
 * error rl_conn_begin records on every call.
 */
static inline bool
rl_conn_tls_on_socket(void)
{
	return rl_redis_tls && rl_redis_socket[0] != '\0' &&
		rl_redis_mode == RL_MODE_STANDALONE;
}

/*
 * Makes sure a usable connection is open.  False means Redis is
 * unavailable for this call: inside the retry interval after a failure,
 * or a connection attempt that just failed.
 */
bool
rl_conn_begin(void)
{
	rl_require_preload();
	rl_nodes_begin();

	/*
	 * New endpoint, mode or credentials (rl_guc.c's assign hooks count the
	 * changes): reconnect, and try them at once.
	 */
	if (rl_conn_generation != rl_settings_generation)
	{
		rl_nodes_forget();
		rl_cluster_reset();
		rl_sentinel_reset();
		rl_conn_generation = rl_settings_generation;
	}

	/*
	 * Settings that cannot work together are configuration errors, answered
	 * by the policy (and named in the WARNING) like a wrong password.
	 */
	if (rl_redis_mode == RL_MODE_SENTINEL)
		return rl_sentinel_check();
	if (rl_redis_mode == RL_MODE_CLUSTER && rl_redis_db != 0)
	{
		rl_conn_misconfigured("ratelimit.redis_db",
							  "ratelimit.redis_db must be 0 with Redis Cluster, which has only database 0");
		return false;
	}
	if (rl_conn_tls_on_socket())
	{
		rl_conn_misconfigured("ratelimit.redis_socket",
							  "ratelimit.redis_tls needs a TCP connection, and ratelimit.redis_socket names a Unix socket; clear one of them");
		return false;
	}
	if (rl_redis_mode == RL_MODE_CLUSTER && rl_redis_socket[0] != '\0')
	{
		rl_conn_misconfigured("ratelimit.redis_socket",
							  "ratelimit.redis_socket is not used with Redis Cluster; list the nodes in ratelimit.redis_nodes");
		return false;
	}
	return true;
}

/*
 * True when a call can know before building anything that Redis is
 * unavailable: the standalone server rests in its retry interval after a
 * failure, under the settings that failed (what rl_conn_begin and
 * rl_node_ready would find, without their work).  The current node is
 * then the standalone one.  During an outage a check costs the failure
 * policy's answer and little more.  Sentinel and cluster modes are never
 * resting here: their topology is asked first, and may name another node.
 */
bool
rl_conn_resting(void)
{
	RlNode	   *node;

	if (rl_redis_mode != RL_MODE_STANDALONE ||
		rl_conn_generation != rl_settings_generation ||
		rl_conn_tls_on_socket())	/* rl_conn_begin records it every call */
		return false;
	node = rl_standalone_node();
	if (!rl_node_resting(node))
		return false;
	rl_conn_set_current(node);
	return true;
}

/*
 * Makes sure the node has a usable connection, and makes it the current
 * node.  False means the node is unavailable for this call: inside its
 * retry interval after a failure, or a connection attempt that just
 * failed (recorded).
 */
bool
rl_node_ready(RlNode *node)
{
	bool		opened;

	if (!rl_node_open(node, &opened))
		return false;
	/* A master the Sentinels named must say it is one (ROLE). */
	if (opened && rl_redis_mode == RL_MODE_SENTINEL &&
		node == rl_standalone_node())
		return rl_sentinel_confirm_role(node);
	return true;
}

/*
 * Makes sure the standalone connection is usable.  False means Redis is
 * unavailable for this call.
 */
bool
rl_conn_ready(void)
{
	if (!rl_conn_begin())
		return false;
	return rl_node_ready(rl_standalone_node());
}

/*
 * What rl_status() shows as the endpoint: the standalone server, or
 * "cluster:<seeds> (N masters)".
 */
const char *
rl_conn_status_endpoint(void)
{
	if (rl_redis_mode == RL_MODE_CLUSTER)
		return rl_cluster_endpoint();
	if (rl_redis_mode == RL_MODE_SENTINEL)
		return rl_sentinel_endpoint();
	return rl_conn_endpoint();
}

