/*-------------------------------------------------------------------------
 *
 * rl_probe.c
 *	  rl_ping() on the Redis store: connect now, have each server answer a
 *	  PING, and time it.
 *
 * The verification step of the installation (README, "Installation"),
 * and a monitor's check: unlike a call of rl_allow, which a resting node
 * or the failure policy answers without a word, the probe tries now,
 * whatever is left of a node's retry interval, and a server that cannot
 * be used is a failure the engine raises as an ERROR.  It runs over the
 * backend's own links and code (rl_conn.c, rl_connect.c: TLS, AUTH,
 * SELECT, the INFO that names the server; the round trips of
 * rl_roundtrip.c, every wait on the latch under connect_timeout and
 * command_timeout, so statement_timeout and a cancel end it), and keeps
 * what it opened, as a call would: the next call of the session finds the
 * link open.  It asks
 *   - standalone: the server of redis_host/redis_port or redis_socket;
 *   - Sentinel: the Sentinels, now, for the master, then the master;
 *   - Cluster: a node for the slot map, now, then every master it names.
 * A failure is recorded on its node as any call's is (rl_status, the
 * counters, the node rests), so the probe and the calls agree.
 *
 * PING is answered by any Redis, and its round trip is the one measured.
 * An ACL user without it (README's least-privilege user has only what the
 * scripts run) gets NOPERM: an answer all the same, from a server that is
 * there and took our credentials.  The product and version are those the
 * connection's INFO named (rl_connect.c), unknown when the ACL refused it.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_probe.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "portability/instr_time.h"
#include "utils/timestamp.h"

#include "rl_cluster.h"
#include "rl_node.h"
#include "rl_sentinel.h"

/* ratelimit.redis_mode, as rl_ping() shows it. */
static const char *
rl_probe_mode(void)
{
	switch (rl_redis_mode)
	{
		case RL_MODE_CLUSTER:
			return "cluster";
		case RL_MODE_SENTINEL:
			return "sentinel";
		default:
			return "standalone";
	}
}

/*
 * The settings that say where the server is, for a hint when nothing
 * answers there; NULL for a cluster master or a Sentinel's master, whose
 * address comes from the servers, not from a setting.
 */
static const char *
rl_probe_where(const RlNode *node)
{
	if (rl_redis_mode == RL_MODE_CLUSTER)
	{
		if (node != NULL)
			return NULL;
		return rl_redis_nodes[0] != '\0' ? "ratelimit.redis_nodes" :
			"ratelimit.redis_host and ratelimit.redis_port";
	}
	if (rl_redis_mode == RL_MODE_SENTINEL)
		return node != NULL ? NULL :
			"ratelimit.redis_nodes and ratelimit.sentinel_master";
	if (rl_redis_socket[0] != '\0')
		return "ratelimit.redis_socket";
	return "ratelimit.redis_host and ratelimit.redis_port";
}

/*
 * Fills *pf from the failure just recorded on the current node: linked
 * says the connection was open by then, node is the server asked (NULL:
 * the one the settings name, or the Sentinels, or the cluster's seeds).
 * The hint names the setting to fix: the one the failure names, else
 * where the server is, else the timeout that ran out.  Returns -1, the
 * probe's answer.
 */
static int
rl_probe_failed(RlProbeFailure *pf, bool linked, const RlNode *node,
				const char *detail)
{
	const RlFailure *f = rl_conn_current_failure();
	const char *what = f->what;
	const char *where = rl_probe_where(node);
	const char *p;

	pf->reason = f->reason;
	pf->linked = linked;
	strlcpy(pf->subject, f->subject, sizeof(pf->subject));

	/* rl_conn.c prefixes "misconfigured (<setting>): ", the hint's own. */
	if (f->setting != NULL && strncmp(what, "misconfigured (", 15) == 0 &&
		(p = strstr(what, "): ")) != NULL)
		what = p + 3;
	strlcpy(pf->what, what[0] != '\0' ? what : "no server answered",
			sizeof(pf->what));
	strlcpy(pf->detail, detail != NULL ? detail : "", sizeof(pf->detail));

	if (f->setting != NULL)
		snprintf(pf->hint, sizeof(pf->hint), "Check %s.", f->setting);
	else if (f->reason == RL_FAILED_TIMEOUT && linked)
		snprintf(pf->hint, sizeof(pf->hint),
				 "The server did not answer within ratelimit.command_timeout (%d ms): look for what holds it (a long command, a stopped process), or raise ratelimit.command_timeout.",
				 rl_command_timeout);
	else if (f->reason == RL_FAILED_TIMEOUT && where != NULL)
		snprintf(pf->hint, sizeof(pf->hint),
				 "Check that Redis runs and is reachable there, or correct %s; ratelimit.connect_timeout is %d ms.",
				 where, rl_connect_timeout);
	else if (f->reason == RL_FAILED_CONNECT && where != NULL)
		snprintf(pf->hint, sizeof(pf->hint),
				 "Start Redis there, or correct %s.", where);
	else if (where != NULL)
		snprintf(pf->hint, sizeof(pf->hint),
				 "Check the server there and its log, or correct %s.", where);
	else if (rl_redis_mode == RL_MODE_CLUSTER)
		snprintf(pf->hint, sizeof(pf->hint),
				 "The cluster's slot map names this master: check it (CLUSTER NODES) and its log; ratelimit.connect_timeout is %d ms, ratelimit.command_timeout %d ms.",
				 rl_connect_timeout, rl_command_timeout);
	else
		snprintf(pf->hint, sizeof(pf->hint),
				 "The Sentinels name this master: check it and its log; ratelimit.connect_timeout is %d ms, ratelimit.command_timeout %d ms.",
				 rl_connect_timeout, rl_command_timeout);
	return -1;
}

/*
 * Has the node, connected, answer a PING by command_timeout, and fills
 * row with its endpoint, product, version and the round trip.  False
 * (recorded on the node) when it did not answer, or answered with an
 * error other than NOPERM.
 */
static bool
rl_probe_ping(RlNode *node, RlProbeRow *row)
{
	const char *argv[1] = {"PING"};
	size_t		argvlen[1] = {4};
	RlCommand	cmd = {1, argv, argvlen};
	redisReply *reply;
	instr_time	start;
	instr_time	took;
	TimestampTz deadline;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	INSTR_TIME_SET_CURRENT(start);
	if (!rl_node_roundtrip(node, &cmd, 1, &reply, deadline, false))
		return false;
	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, start);

	if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOPERM", 6) != 0)
	{
		char		msg[200];
		const char *setting;

		rl_reply_text(reply->str, msg, sizeof(msg));
		freeReplyObject(reply);
		setting = rl_reply_setting(msg);
		if (setting != NULL)
			rl_conn_misconfigured(setting, "Redis refused PING: %s", msg);
		else
			rl_conn_failure(RL_FAILED_UNAVAILABLE, true,
							"Redis could not answer PING: %s", msg);
		return false;
	}
	if (reply->type != REDIS_REPLY_ERROR &&
		(reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, "PONG") != 0))
	{
		/* A peer out of step, or not Redis: its link cannot be trusted. */
		freeReplyObject(reply);
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "unexpected reply to PING from Redis");
		return false;
	}
	freeReplyObject(reply);
	rl_conn_succeeded();

	row->engine = "redis";
	row->mode = rl_probe_mode();
	rl_conn_set_current(node);
	strlcpy(row->endpoint, rl_conn_endpoint(), sizeof(row->endpoint));
	strlcpy(row->server, node->server_name, sizeof(row->server));
	strlcpy(row->version, node->server_version, sizeof(row->version));
	row->rtt_ms = INSTR_TIME_GET_MILLISEC(took);
	return true;
}

/*
 * Cluster: a slot map fetched now, then every master it names, each
 * connected and PINGed in turn (so each round trip is its own).  A slot
 * no master serves is a failure too: its keys would get the policy's
 * answer.
 */
static int
rl_probe_cluster(RlProbeRow *rows, int max, RlProbeFailure *pf)
{
	RlNode	   *masters[RL_MAX_NODES];
	TimestampTz deadline;
	int			unserved;
	int			n;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_connect_timeout + rl_command_timeout);
	n = rl_cluster_masters_now(masters, Min(max, RL_MAX_NODES), &unserved,
							   deadline);
	if (n < 0)
		return rl_probe_failed(pf, false, NULL,
							   "No node of the cluster gave its slot map (CLUSTER SLOTS); this is what the last one asked did.");
	if (unserved > 0 || n == 0)
	{
		rl_conn_set_current(rl_standalone_node());
		rl_conn_failure(RL_FAILED_UNAVAILABLE, true,
						"no master serves %d of the %d hash slots",
						unserved, RL_CLUSTER_SLOTS);
		pf->reason = RL_FAILED_UNAVAILABLE;
		pf->linked = true;
		snprintf(pf->subject, sizeof(pf->subject), "Redis Cluster %s",
				 rl_cluster_endpoint());
		snprintf(pf->what, sizeof(pf->what),
				 "no master serves %d of the %d hash slots",
				 unserved, RL_CLUSTER_SLOTS);
		strlcpy(pf->detail, "Checks of keys in those slots get the answer of ratelimit.failure_mode.",
				sizeof(pf->detail));
		strlcpy(pf->hint, "Check the cluster's state (CLUSTER INFO, CLUSTER SLOTS): a master may be down with no replica to take over.",
				sizeof(pf->hint));
		return -1;
	}
	for (int k = 0; k < n; k++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!rl_node_ready(masters[k]))
			return rl_probe_failed(pf, false, masters[k], NULL);
		if (!rl_probe_ping(masters[k], &rows[k]))
			return rl_probe_failed(pf, true, masters[k], NULL);
	}
	return n;
}

/*
 * The Redis store's probe (RlStoreOps.probe): every node may be tried at
 * once, the Sentinels are asked for the master again and a cluster's map
 * is fetched again, then each server answers a PING.
 */
int
rl_redis_probe(RlProbeRow *rows, int max, RlProbeFailure *pf)
{
	RlNode	   *node;

	memset(pf, 0, sizeof(RlProbeFailure));
	rl_conn_wake();
	rl_sentinel_mark_stale();
	rl_cluster_mark_stale();
	if (!rl_conn_begin())
		return rl_probe_failed(pf, false, NULL, NULL);
	if (rl_redis_mode == RL_MODE_CLUSTER)
		return rl_probe_cluster(rows, max, pf);

	node = rl_standalone_node();
	if (!rl_node_ready(node))
		return rl_probe_failed(pf, false,
							   rl_redis_mode == RL_MODE_SENTINEL ? node : NULL,
							   NULL);
	if (max < 1)
		return 0;
	if (!rl_probe_ping(node, &rows[0]))
		return rl_probe_failed(pf, true,
							   rl_redis_mode == RL_MODE_SENTINEL ? node : NULL,
							   NULL);
	return 1;
}
