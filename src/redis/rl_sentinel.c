/*-------------------------------------------------------------------------
 *
 * rl_sentinel.c
 *	  Redis Sentinel: finding the master and staying with it.
 *
 * In sentinel mode (ratelimit.redis_mode = sentinel) ratelimit.redis_nodes
 * lists the Sentinels, and the standalone node of rl_node.c is pointed at
 * the master they name, following the Sentinel client rules: ask the
 * Sentinels in turn (the last one that answered first) for
 * SENTINEL get-master-addr-by-name, connect, and confirm with ROLE that
 * the server is a master.  Ask again after any failure on the master (an
 * error, a READONLY reply, a timeout, a broken link) and at least every
 * ratelimit.sentinel_check_interval: after SENTINEL FAILOVER the old
 * master goes on accepting writes, which the fail-over then forgets, for
 * about ten seconds, until Sentinel reconfigures it; waiting to be
 * disconnected would lose all of them.
 *
 * The check is made by the call that finds the interval passed, before it
 * sends anything, and costs that call one round trip to a Sentinel whose
 * link is kept open; other calls pay nothing.  A master whose address
 * changed is dropped between calls, when its link is idle, so no command
 * is ever sent twice.  Sentinels speak with their own credentials
 * (ratelimit.sentinel_username/sentinel_password); the Redis credentials
 * are the master's, and go to the address the Sentinels name only while
 * something vouches for it (rl_connect.c's rl_sentinel_guard).
 *
 * In redis/'s order (test/layers.sh's ORDER; rl_conn.c's banner) this
 * file calls only the link below it (rl_connect.c, rl_roundtrip.c,
 * rl_node.c), never rl_cluster.c beside it: a failure on the master makes
 * it ask again through rl_node.c's failure count, not a call from below.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_sentinel.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "rl_sentinel.h"

/* The Sentinel asked first: the last one that answered. */
static int	rl_first_sentinel = 0;

/*
 * The master must be asked for before the next use: so marked, or a
 * failure on a Redis node was recorded since it was named (rl_node.c's
 * rl_conn_failure_epoch, noted in rl_failures_seen).
 */
static bool rl_stale = true;
static uint64 rl_failures_seen = 0;

/* When the Sentinels last named the master, and whether they have. */
static TimestampTz rl_checked_at = 0;
static bool rl_resolved = false;

/* What one Sentinel said. */
typedef enum RlSentinelAnswer
{
	RL_SENTINEL_ADDRESS,		/* the master's address */
	RL_SENTINEL_UNKNOWN,		/* a null reply: no master of that name */
	RL_SENTINEL_FAILED			/* no answer, or a refusal (recorded) */
} RlSentinelAnswer;

/* Forgets the master (new settings): the next call asks. */
void
rl_sentinel_reset(void)
{
	rl_first_sentinel = 0;
	rl_stale = true;
	rl_checked_at = 0;
	rl_resolved = false;
}

/*
 * rl_ping asks the Sentinels again before it trusts the master it knows:
 * it reports what they say now.
 */
void
rl_sentinel_mark_stale(void)
{
	rl_stale = true;
}

/*
 * Asks one Sentinel for the master's address, into host/port.  A failure
 * is recorded on the Sentinel only (rl_node.c keeps it quiet); the caller
 * reports what all of them said.
 */
static RlSentinelAnswer
rl_sentinel_ask(RlNode *sentinel, char *host, size_t hostsize, int *port)
{
	const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
	rl_sentinel_master};
	size_t		argvlen[3];
	RlCommand	cmd = {3, argv, argvlen};
	redisReply *reply;
	TimestampTz deadline;
	RlSentinelAnswer answer = RL_SENTINEL_FAILED;

	for (int i = 0; i < 3; i++)
		argvlen[i] = strlen(argv[i]);
	if (!rl_node_open(sentinel, NULL))
		return RL_SENTINEL_FAILED;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	if (!rl_node_roundtrip(sentinel, &cmd, 1, &reply, deadline, false))
		return RL_SENTINEL_FAILED;

	if (reply->type == REDIS_REPLY_NIL)
		answer = RL_SENTINEL_UNKNOWN;
	else if (reply->type == REDIS_REPLY_ERROR)
	{
		const char *setting = rl_sentinel_reply_setting(reply->str);

		if (setting != NULL)
			rl_conn_misconfigured(setting, "Sentinel refused the query: %s",
								  reply->str);
		else
			rl_conn_failure(RL_FAILED_UNAVAILABLE, true, "Sentinel could not answer: %s", reply->str);
	}
	else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
			 reply->element[0]->type == REDIS_REPLY_STRING &&
			 reply->element[1]->type == REDIS_REPLY_STRING &&
			 reply->element[0]->len > 0 && reply->element[0]->len < hostsize &&
			 atoi(reply->element[1]->str) > 0 &&
			 atoi(reply->element[1]->str) <= 65535)
	{
		strlcpy(host, reply->element[0]->str, hostsize);
		*port = atoi(reply->element[1]->str);
		answer = RL_SENTINEL_ADDRESS;
	}
	else
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "unexpected reply to SENTINEL get-master-addr-by-name");
	freeReplyObject(reply);
	if (answer != RL_SENTINEL_FAILED)
		rl_conn_succeeded();
	return answer;
}

/*
 * Asks the Sentinels in turn, starting with the last that answered, until
 * one names the master; within connect_timeout + command_timeout for all
 * of them.  Then points the master node there.  False when none did: the
 * failure is recorded on the master with the reason, distinct for "no
 * Sentinel answered", "no Sentinel knows the name" and "the Sentinels
 * refused our credentials".
 */
static bool
rl_sentinel_resolve(RlNode *master)
{
	char	   *hosts[RL_MAX_NODES];
	int			ports[RL_MAX_NODES];
	char		why[256];
	char		host[256];
	int			port = 0;
	int			n;
	int			asked = 0;
	int			unknown = 0;
	const char *refused_setting = NULL;
	char		refused[300] = "";
	char		down[300] = "";
	TimestampTz budget;

	n = rl_parse_nodes(rl_redis_nodes, hosts, ports, RL_MAX_NODES,
							   why, sizeof(why));
	budget = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										 rl_connect_timeout + rl_command_timeout);
	for (int k = 0; k < n; k++)
	{
		int			i = (rl_first_sentinel + k) % n;
		RlNode	   *sentinel = rl_sentinel_lookup(hosts[i], ports[i]);
		RlSentinelAnswer answer;
		const char *setting;
		const char *what;

		if (sentinel == NULL)
			continue;
		if (k > 0 && GetCurrentTimestamp() >= budget)
			break;
		asked++;
		answer = rl_sentinel_ask(sentinel, host, sizeof(host), &port);
		if (answer == RL_SENTINEL_ADDRESS)
		{
			rl_first_sentinel = i;
			break;
		}
		if (answer == RL_SENTINEL_UNKNOWN)
		{
			unknown++;
			continue;
		}
		what = rl_node_failure(sentinel, &setting);
		if (setting != NULL)
		{
			refused_setting = setting;
			snprintf(refused, sizeof(refused), "Sentinel %s:%d: %s",
					 hosts[i], ports[i], what != NULL ? what : "refused");
		}
		else
			snprintf(down, sizeof(down), "Sentinel %s:%d: %s",
					 hosts[i], ports[i], what != NULL ? what : "unavailable");
		port = 0;
	}

	rl_conn_set_current(master);
	if (port > 0)
	{
		if (!rl_resolved || strcmp(rl_node_host(master), host) != 0 ||
			rl_node_port(master) != port)
			ereport(rl_resolved ? LOG : DEBUG1,
					(errmsg("ratelimit: Sentinel names %s:%d as master of \"%s\"",
							host, port, rl_sentinel_master)));
		rl_node_set_address(master, host, port);
		rl_resolved = true;
		rl_stale = false;
		rl_failures_seen = rl_conn_failure_epoch();
		rl_checked_at = GetCurrentTimestamp();
		return true;
	}

	if (unknown > 0)
		rl_conn_misconfigured("ratelimit.sentinel_master",
							  "no Sentinel knows a master named \"%s\" (%d of the %d asked answered that they do not)",
							  rl_sentinel_master, unknown, asked);
	else if (refused_setting != NULL)
		rl_conn_misconfigured(refused_setting, "%s", refused);
	else
		rl_conn_failure(RL_FAILED_UNAVAILABLE, false, "no Sentinel of ratelimit.redis_nodes could be reached (%d asked); last: %s",
						asked, down[0] != '\0' ? down : "none tried");
	return false;
}

/*
 * Called by each call in sentinel mode before it uses the master: asks
 * the Sentinels when the master is unknown, after a failure on it, or once
 * sentinel_check_interval has passed.  False (recorded) when the settings
 * cannot work or would expose the Redis password (rl_sentinel_guard), or
 * no Sentinel named the master; the call then gets the policy's answer.
 * A master inside its retry interval is left to rl_node_ready, which
 * answers false, so an outage costs the Sentinels one question per
 * retry_interval, not one per call.
 */
bool
rl_sentinel_check(void)
{
	RlNode	   *master = rl_standalone_node();
	TimestampTz now;

	if (rl_redis_nodes[0] == '\0')
	{
		rl_conn_misconfigured("ratelimit.redis_nodes",
							  "ratelimit.redis_nodes must list the Sentinels (host:port, ...) when ratelimit.redis_mode is \"sentinel\"");
		return false;
	}
	if (rl_redis_socket[0] != '\0')
	{
		rl_conn_misconfigured("ratelimit.redis_socket",
							  "ratelimit.redis_socket is not used with Redis Sentinel, which names the master by host and port");
		return false;
	}
	if (!rl_sentinel_guarded())
		return false;
	if (rl_node_resting(master))
		return true;
	now = GetCurrentTimestamp();
	if (!rl_stale && rl_failures_seen == rl_conn_failure_epoch() &&
		rl_resolved &&
		(rl_sentinel_check_interval == 0 ||
		 !TimestampDifferenceExceeds(rl_checked_at, now,
									 rl_sentinel_check_interval)))
		return true;
	return rl_sentinel_resolve(master);
}

/*
 * Run on each new connection to the master: a server the Sentinels named
 * must say ROLE master.  A replica (the Sentinel has not seen the
 * promotion yet, or a stale master was reconfigured) is a failure, so the
 * next attempt asks the Sentinels again.
 */
bool
rl_sentinel_confirm_role(RlNode *master)
{
	const char *argv[1] = {"ROLE"};
	size_t		argvlen[1] = {4};
	RlCommand	cmd = {1, argv, argvlen};
	redisReply *reply;
	TimestampTz deadline;
	char		role[32];

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	if (!rl_node_roundtrip(master, &cmd, 1, &reply, deadline, false))
		return false;
	if (reply->type == REDIS_REPLY_ERROR)
	{
		char		msg[200];
		const char *setting;

		strlcpy(msg, reply->str, sizeof(msg));
		freeReplyObject(reply);
		setting = rl_reply_setting(msg);
		if (setting != NULL)
			rl_conn_misconfigured(setting, "Redis refused ROLE: %s", msg);
		else
			rl_conn_failure(RL_FAILED_UNAVAILABLE, false, "Redis refused ROLE: %s", msg);
		return false;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
		reply->element[0]->type != REDIS_REPLY_STRING)
	{
		freeReplyObject(reply);
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "unexpected reply to ROLE from Redis");
		return false;
	}
	strlcpy(role, reply->element[0]->str, sizeof(role));
	freeReplyObject(reply);
	if (strcmp(role, "master") != 0)
	{
		rl_conn_failure(RL_FAILED_UNAVAILABLE, false, "Sentinel named %s as master of \"%s\" but it is a %s",
						rl_conn_endpoint(), rl_sentinel_master,
						strcmp(role, "slave") == 0 ? "replica" : role);
		return false;
	}
	return true;
}

/*
 * The endpoint rl_status() and messages show: "sentinel:<master>@host:port"
 * once the Sentinels named it, "sentinel:<master>" before.
 */
const char *
rl_sentinel_endpoint(void)
{
	static char buf[600];
	RlNode	   *master = rl_standalone_node();

	if (rl_resolved)
		snprintf(buf, sizeof(buf), "sentinel:%s@%s:%d", rl_sentinel_master,
				 rl_node_host(master), rl_node_port(master));
	else
		snprintf(buf, sizeof(buf), "sentinel:%s", rl_sentinel_master);
	return buf;
}
