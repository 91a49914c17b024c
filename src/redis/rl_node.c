/*-------------------------------------------------------------------------
 *
 * rl_node.c
 *	  A backend's Redis nodes: which it knows, the current one, and failures.
 *
 * A node (RlNode, rl_node.h) is one Redis server: the standalone server of
 * the settings, or one master of a Redis Cluster (rl_cluster.c finds
 * them), or a Sentinel.  Each backend opens one connection per node,
 * lazily on first use (rl_connect.c), and keeps it across calls and
 * transactions; rl_roundtrip.c runs the round trips over it, every wait
 * on the latch.  A cluster node is made on first sight (in the slot map,
 * in a redirect) and let go of when a new slot map no longer names it, so
 * the RL_MAX_NODES a backend holds at a time suffice however often the
 * cluster's addresses change.
 *
 * A command whose reply has not arrived is never sent again.  If a wait is
 * cut short (our timeout, an interrupt, a broken link) the connection is
 * dropped, so a late reply can never be taken as the answer to a later
 * call.  After a failure no new attempt is made on that node for
 * retry_interval, so a dead Redis costs a policy answer, not a timeout,
 * per call; in a cluster the other nodes go on answering.
 *
 * The failure bookkeeping (rl_conn_failure, rl_conn_succeeded ...) acts on
 * the current node: the one last readied or used for a round trip.  It is
 * the link's: the node rests, its link is dropped, rl_status().last_error
 * is set, the failure is counted under its reason, and the node's
 * RlFailure (rl_store.h) says what happened.  What a call is answered
 * meanwhile, and the WARNING, are the failure policy's (rl_policy.c),
 * which reads that record with every check the store leaves unanswered.
 *
 * This is the bottom of the link but for the bytes (rl_link.c): it calls
 * no other file of redis/.  Readying a node for a call is rl_conn.c's, on
 * top; opening its link is rl_connect.c's.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_node.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>

#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "rl_node.h"
#include "rl_stats.h"

/* Every node this backend knows; [0] is the standalone node. */
static RlNode *rl_nodes[RL_MAX_NODES + 1];
static int	rl_num_nodes = 0;

/*
 * Cluster nodes let go of (rl_conn_keep_nodes), freed at the next call's
 * start: the call that let them go may still hold them.
 */
static RlNode *rl_retired = NULL;

/* The node the failure bookkeeping acts on (see the file's banner). */
RlNode	   *rl_conn_cur = NULL;

/* Failure state shown by rl_status(). */
static char rl_last_error[256] = "";
static TimestampTz rl_last_error_at = 0;
static bool rl_exit_registered = false;

/*
 * Failures recorded on a Redis node, not a Sentinel, since the backend
 * started.  The topologies above compare it with the count they saw when
 * they last named their nodes (rl_cluster.c's slot map, rl_sentinel.c's
 * master): a failure since then makes them ask again before they trust
 * what they know, without this file calling up to them.
 */
static uint64 rl_failure_epoch = 0;

/*
 * Drops the connection.  When a command is out and its reply unread (a
 * timeout, a cancel, a broken link), the socket is reset, not closed: a
 * plain close leaves the kernel retransmitting the unacknowledged command
 * for seconds after the call was answered by the policy, so a command
 * sent into a black-holed network would reach Redis once the path came
 * back and be counted behind the policy's answer (charging a call that
 * fail-closed had denied).  With SO_LINGER 0, close() discards whatever
 * is unsent or unacknowledged and sends RST.  What Redis has already
 * received may still run, once; nothing is delivered afterwards.
 */
void
rl_node_discard(RlNode *node)
{
	if (node->waitset != NULL)
	{
		FreeWaitEventSet(node->waitset);
		node->waitset = NULL;
	}
	if (node->ctx != NULL)
	{
		if (node->busy && node->ctx->fd >= 0)
		{
			struct linger reset = {.l_onoff = 1,.l_linger = 0};

			(void) setsockopt(node->ctx->fd, SOL_SOCKET, SO_LINGER, &reset,
							  sizeof(reset));
		}
		if (node->ssl != NULL)
			rl_tls_close(node->ssl);
		node->ssl = NULL;
		redisFree(node->ctx);
		node->ctx = NULL;
		ReleaseExternalFD();
	}
	node->busy = false;
	node->server_name[0] = '\0';
	node->server_version[0] = '\0';
}

/* Drops every node's connection. */
static void
rl_discard_all(void)
{
	for (int i = 0; i < rl_num_nodes; i++)
		rl_node_discard(rl_nodes[i]);
	for (RlNode *node = rl_retired; node != NULL; node = node->next_retired)
		rl_node_discard(node);
}

/* Closes the sockets when the backend exits, so Redis sees them go at once. */
static void
rl_at_exit(int code, Datum arg)
{
	rl_discard_all();
}

/* A node with no connection yet, in TopMemoryContext. */
static RlNode *
rl_node_make(const char *host, int port)
{
	RlNode	   *node = MemoryContextAllocZero(TopMemoryContext, sizeof(RlNode));

	node->host = host != NULL ? MemoryContextStrdup(TopMemoryContext, host) : NULL;
	node->port = port;
	node->sock_pos = -1;
	return node;
}

/* The standalone node: the server of redis_host/port or redis_socket. */
RlNode *
rl_standalone_node(void)
{
	if (rl_num_nodes == 0)
		rl_nodes[rl_num_nodes++] = rl_node_make(NULL, 0);
	return rl_nodes[0];
}

/*
 * The cluster node at host:port, made on first sight; NULL when this
 * backend already knows RL_MAX_NODES of them.
 */
RlNode *
rl_node_lookup(const char *host, int port)
{
	(void) rl_standalone_node();
	for (int i = 1; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->port == port && strcmp(rl_nodes[i]->host, host) == 0)
			return rl_nodes[i];
	}
	if (rl_num_nodes > RL_MAX_NODES)
		return NULL;
	rl_nodes[rl_num_nodes] = rl_node_make(host, port);
	return rl_nodes[rl_num_nodes++];
}

/*
 * Lets go of every cluster node whose address is not one of the n given
 * (the masters of a new slot map): its link is closed and it leaves the
 * registry, so that nodes the cluster no longer names (restarted on other
 * addresses, removed) never fill it.  The node itself is freed at the
 * next call's start (rl_free_retired): the call under way may still hold
 * it as a redirect's target or as the node a policy answer names.
 */
void
rl_conn_keep_nodes(const char *const *hosts, const int *ports, int n)
{
	int			kept = 1;

	if (rl_num_nodes == 0)
		return;
	for (int i = 1; i < rl_num_nodes; i++)
	{
		RlNode	   *node = rl_nodes[i];
		bool		keep = node->sentinel;

		for (int k = 0; k < n && !keep; k++)
			keep = node->port == ports[k] && strcmp(node->host, hosts[k]) == 0;
		if (keep)
		{
			rl_nodes[kept++] = node;
			continue;
		}
		rl_node_discard(node);
		node->next_retired = rl_retired;
		rl_retired = node;
	}
	for (int i = kept; i < rl_num_nodes; i++)
		rl_nodes[i] = NULL;
	rl_num_nodes = kept;
}

/* Frees the nodes let go of; no call holds them any more. */
static void
rl_free_retired(void)
{
	while (rl_retired != NULL)
	{
		RlNode	   *node = rl_retired;

		rl_retired = node->next_retired;
		rl_node_discard(node);
		pfree(node->host);
		pfree(node);
	}
}

/*
 * A Sentinel at host:port (ratelimit.redis_nodes in sentinel mode), kept
 * in the registry with the cluster nodes, which that mode does not use.
 */
RlNode *
rl_sentinel_lookup(const char *host, int port)
{
	RlNode	   *node = rl_node_lookup(host, port);

	if (node != NULL)
		node->sentinel = true;
	return node;
}

/*
 * Points the standalone node at the master the Sentinels named (NULL: back
 * to redis_host/redis_port).  A new address drops the old link, which is
 * idle between calls, and forgets what was known of the old server: its
 * retry interval and what it lost or refused of the scripts.
 */
void
rl_node_set_address(RlNode *node, const char *host, int port)
{
	if (node->host == NULL ? host == NULL :
		(host != NULL && node->port == port && strcmp(node->host, host) == 0))
		return;
	rl_node_discard(node);
	if (node->host != NULL)
		pfree(node->host);
	node->host = host != NULL ? MemoryContextStrdup(TopMemoryContext, host) : NULL;
	node->port = port;
	node->retry_at = 0;
	node->failure_filled = 0;	/* its words name the old address */
	memset(&node->scripts, 0, sizeof(RlNodeScripts));
}

/*
 * The last failure on a Sentinel node (NULL if none), and the setting it
 * points at (NULL for an outage).
 */
const char *
rl_node_failure(const RlNode *node, const char **setting)
{
	*setting = node->sentinel_setting;
	return node->sentinel_error[0] != '\0' ? node->sentinel_error : NULL;
}

/* Forgets every cluster node (their links are already closed). */
static void
rl_forget_cluster_nodes(void)
{
	for (int i = 1; i < rl_num_nodes; i++)
	{
		Assert(rl_nodes[i]->ctx == NULL);
		pfree(rl_nodes[i]->host);
		pfree(rl_nodes[i]);
		rl_nodes[i] = NULL;
	}
	rl_num_nodes = Min(rl_num_nodes, 1);
	rl_conn_cur = rl_num_nodes > 0 ? rl_nodes[0] : NULL;
}

/*
 * Starts a call on the nodes (rl_conn_begin): the standalone node is the
 * current one, the nodes the last call let go of are freed, and a link
 * whose reply is unread is dropped.
 */
void
rl_nodes_begin(void)
{
	rl_conn_cur = rl_standalone_node();
	if (rl_retired != NULL)
		rl_free_retired();

	/* A command cut short by an error left its reply unread: drop it. */
	for (int i = 0; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->ctx != NULL && rl_nodes[i]->busy)
			rl_node_discard(rl_nodes[i]);
	}
}

/*
 * Forgets the nodes when the settings changed (rl_conn_begin): every link
 * is closed, the cluster nodes go, and the standalone node is back at the
 * configured server, to be tried at once with nothing known of it.
 */
void
rl_nodes_forget(void)
{
	rl_discard_all();
	rl_tls_forget();
	rl_forget_cluster_nodes();
	rl_node_set_address(rl_nodes[0], NULL, 0);
	rl_nodes[0]->retry_at = 0;
	rl_nodes[0]->failure_filled = 0;	/* named under the old settings */
	memset(&rl_nodes[0]->scripts, 0, sizeof(RlNodeScripts));
}

/*
 * Has the backend's exit close every node's socket (rl_at_exit); called
 * before the first connection is opened, once.
 */
void
rl_nodes_close_at_exit(void)
{
	if (!rl_exit_registered)
	{
		on_proc_exit(rl_at_exit, (Datum) 0);
		rl_exit_registered = true;
	}
}

bool
rl_node_connected(const RlNode *node)
{
	return node->ctx != NULL;
}

/* True while the node is inside its retry interval after a failure. */
bool
rl_node_resting(const RlNode *node)
{
	return node->retry_at != 0 && GetCurrentTimestamp() < node->retry_at;
}

const char *
rl_node_host(const RlNode *node)
{
	return node->host != NULL ? node->host : rl_redis_host;
}

int
rl_node_port(const RlNode *node)
{
	return node->host != NULL ? node->port : rl_redis_port;
}

/* Makes node the subject of the next failure or success recorded. */
void
rl_conn_set_current(RlNode *node)
{
	rl_conn_cur = node;
}

/*
 * Records a failure: Redis cannot be used for this call and no attempt is
 * made for retry_interval.  "setting" is NULL for an outage (Redis down,
 * stalled, busy) and names the setting to fix for a configuration error
 * (a wrong password, database or socket path), which no waiting cures:
 * the WARNING says so, and rl_status().last_error starts with
 * "misconfigured".  The WARNING is rate-limited; rl_status() keeps the
 * full count.  "keep" leaves an in-sync connection open (BUSY, OOM ...).
 */
static void
rl_record_failure(RlFailReason reason, bool keep, const char *setting,
				  const char *what)
{
	TimestampTz now = GetCurrentTimestamp();
	RlNode	   *node = rl_conn_cur != NULL ? rl_conn_cur : rl_standalone_node();

	/*
	 * One Sentinel failing is no outage while another answers: it only
	 * rests, and rl_sentinel.c reports what all of them said, once.
	 */
	if (node->sentinel)
	{
		node->sentinel_setting = setting;
		strlcpy(node->sentinel_error, what, sizeof(node->sentinel_error));
		node->retry_at = TimestampTzPlusMilliseconds(now, rl_retry_interval);
		if (!keep)
			rl_node_discard(node);
		return;
	}
	rl_failure_epoch++;			/* the topology asks again before use */

	if (setting != NULL)
		snprintf(rl_last_error, sizeof(rl_last_error),
				 "misconfigured (%s): %s", setting, what);
	else
		strlcpy(rl_last_error, what, sizeof(rl_last_error));
	rl_last_error_at = now;
	if (setting != NULL)
		reason = RL_FAILED_MISCONFIGURED;
	rl_counters.failures++;
	rl_stats_failure(reason);
	node->retry_at = TimestampTzPlusMilliseconds(now, rl_retry_interval);

	/* For the failure policy: what happened, and that it happened anew. */
	node->failure.reason = reason;
	node->failure.setting = setting;
	snprintf(node->failure.subject, sizeof(node->failure.subject),
			 "Redis server %s", rl_conn_endpoint());
	strlcpy(node->failure.what, rl_last_error, sizeof(node->failure.what));
	node->failure_filled = rl_failure_epoch + 1;
	node->failure.retry_at = node->retry_at;
	node->failure.events++;

	if (!keep)
		rl_node_discard(node);
}

/*
 * The count of failures recorded on Redis nodes so far: rl_cluster.c and
 * rl_sentinel.c note it when they fetch the slot map or name the master,
 * and take a different count as "the map, or the master, may be stale".
 */
uint64
rl_conn_failure_epoch(void)
{
	return rl_failure_epoch;
}

/* An outage: Redis is down, stalled or cannot serve now. */
void
rl_conn_failure(RlFailReason reason, bool keep, const char *fmt,...)
{
	va_list		args;
	char		what[sizeof(rl_last_error)];

	va_start(args, fmt);
	vsnprintf(what, sizeof(what), fmt, args);
	va_end(args);
	rl_record_failure(reason, keep, NULL, what);
}

/*
 * A refusal that concerns some keys, not the node (TRYAGAIN: their slot
 * is being migrated): recorded like an outage, but the node does not
 * rest for retry_interval, so its other slots are served meanwhile.
 */
void
rl_conn_slot_failure(const char *fmt,...)
{
	va_list		args;
	char		what[sizeof(rl_last_error)];
	RlNode	   *node = rl_conn_cur != NULL ? rl_conn_cur : rl_standalone_node();
	TimestampTz retry_at = node->retry_at;

	va_start(args, fmt);
	vsnprintf(what, sizeof(what), fmt, args);
	va_end(args);
	rl_record_failure(RL_FAILED_UNAVAILABLE, true, NULL, what);
	node->retry_at = retry_at;
	node->failure.retry_at = retry_at;
}

/*
 * A configuration error: the settings named (e.g. "ratelimit.redis_db")
 * are wrong.  The connection is dropped, so that the next attempt, after
 * retry_interval, starts over with whatever the settings are then.
 */
void
rl_conn_misconfigured(const char *setting, const char *fmt,...)
{
	va_list		args;
	char		what[sizeof(rl_last_error)];

	va_start(args, fmt);
	vsnprintf(what, sizeof(what), fmt, args);
	va_end(args);
	rl_record_failure(RL_FAILED_MISCONFIGURED, false, setting, what);
}

/*
 * Copies into buf what a message may show of Redis's error reply: all but
 * the arguments Redis quotes of a command it does not know ("ERR unknown
 * command 'EVALSHA', with args beginning with: '<sha1>' '1' 'rl:{...}'"),
 * which are a limiter's key (a trigger's holds column values the role
 * may not read) or a password.  What is left names the command.
 */
void
rl_reply_text(const char *reply, char *buf, size_t len)
{
	const char *args = strstr(reply, ", with args beginning with");

	if (args != NULL && (size_t) (args - reply) < len)
		len = args - reply + 1;
	strlcpy(buf, reply, len);
}

/*
 * The setting a Sentinel's refusal points at: its credentials, or the
 * list when what answered is not a Sentinel.  Never the Redis password.
 */
const char *
rl_sentinel_reply_setting(const char *reply)
{
	if (strncmp(reply, "WRONGPASS", 9) == 0 ||
		strncmp(reply, "ERR invalid password", 20) == 0 ||
		strncmp(reply, "ERR AUTH", 8) == 0 ||
		strncmp(reply, "ERR Client sent AUTH", 20) == 0)
		return rl_sentinel_password_file[0] != '\0' ?
			"ratelimit.sentinel_password_file and ratelimit.sentinel_username" :
			"ratelimit.sentinel_password and ratelimit.sentinel_username";
	if (strncmp(reply, "NOAUTH", 6) == 0)
		return rl_sentinel_password_file[0] != '\0' ?
			"ratelimit.sentinel_password_file" : "ratelimit.sentinel_password";
	if (strncmp(reply, "NOPERM", 6) == 0)
		return "the Sentinel ACL of ratelimit.sentinel_username";
	if (strncmp(reply, "ERR unknown command", 19) == 0)
		return "ratelimit.redis_nodes";
	return NULL;
}

/*
 * The setting a refusal from Redis points at, or NULL when it is Redis's
 * state rather than ours (LOADING, max clients ...).
 */
const char *
rl_reply_setting(const char *reply)
{
	if (rl_conn_cur != NULL && rl_conn_cur->sentinel)
		return rl_sentinel_reply_setting(reply);
	if (strncmp(reply, "WRONGPASS", 9) == 0 ||
		strncmp(reply, "ERR invalid password", 20) == 0 ||
		strncmp(reply, "ERR AUTH", 8) == 0 ||
		strncmp(reply, "ERR Client sent AUTH", 20) == 0)
		return rl_redis_password_file[0] != '\0' ?
			"ratelimit.redis_password_file and ratelimit.redis_username" :
			"ratelimit.redis_password and ratelimit.redis_username";
	if (strncmp(reply, "NOAUTH", 6) == 0)
		return rl_redis_password_file[0] != '\0' ?
			"ratelimit.redis_password_file" : "ratelimit.redis_password";
	if (strncmp(reply, "NOPERM", 6) == 0)
		return "the Redis ACL of ratelimit.redis_username";
	if (strncmp(reply, "ERR DB index is out of range", 28) == 0 ||
		strncmp(reply, "ERR invalid DB index", 20) == 0)
		return "ratelimit.redis_db";
	return NULL;
}

/*
 * When the current node may be tried again (0: at once), for the failure
 * policy's closed answer, which tells the caller how long to wait.
 */
TimestampTz
rl_conn_current_retry_at(void)
{
	return rl_conn_cur != NULL ? rl_conn_cur->retry_at : 0;
}

/*
 * rl_ping connects now: every node may be tried at once, whatever is left
 * of its retry interval.  A node that fails again rests again.
 */
void
rl_conn_wake(void)
{
	for (int i = 0; i < rl_num_nodes; i++)
		rl_nodes[i]->retry_at = 0;
}

/* A successful round trip ends a run of failures. */
void
rl_conn_succeeded(void)
{
	if (rl_conn_cur == NULL)
		return;
	rl_conn_cur->retry_at = 0;
	rl_conn_cur->failure.retry_at = 0;
	rl_failure_recovered(&rl_conn_cur->failure);
}

/* Drops every link whose reply is still out (after an ERROR mid-call). */
void
rl_conn_discard_busy(void)
{
	for (int i = 0; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->busy)
			rl_node_discard(rl_nodes[i]);
	}
}

/*
 * Where rl_scripts.c keeps what the node lost (a script, the library) or
 * refuses (Functions): it outlives a reconnect, since the server is the
 * same, and is cleared when the settings change, when Sentinel names
 * another master (rl_node_set_address), and with the node.
 */
RlNodeScripts *
rl_node_scripts(RlNode *node)
{
	return &node->scripts;
}

/*
 * True when the node may have Functions: Redis 7.0 or later (Valkey's own
 * version counts, rl_connect.c's rl_parse_version), or a version
 * not known (INFO refused by the ACL, as README's least-privilege line
 * does), and neither the ACL nor the server has refused them.  An older
 * server answers the first FCALL "unknown command" (it did not run), and
 * EVALSHA serves from then on.
 */
bool
rl_node_has_functions(const RlNode *node)
{
	return !node->scripts.functions_refused &&
		(node->server_version[0] == '\0' || atoi(node->server_version) >= 7);
}

/*
 * Drops the connection after a reply of the wrong shape: the peer is out of
 * step (or not Redis), so its next reply cannot be trusted either.
 */
void
rl_conn_drop(void)
{
	if (rl_conn_cur != NULL)
		rl_node_discard(rl_conn_cur);
}

/* True if any node is connected. */
bool
rl_conn_connected(void)
{
	if (rl_redis_mode == RL_MODE_SENTINEL)
		return rl_num_nodes > 0 && rl_nodes[0]->ctx != NULL;
	for (int i = 0; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->ctx != NULL)
			return true;
	}
	return false;
}

/*
 * The current node as host:port (or the socket path, and database),
 * never credentials: the server a message is about.
 */
const char *
rl_conn_endpoint(void)
{
	static char buf[512];

	if (rl_conn_cur != NULL && rl_conn_cur->host != NULL)
	{
		snprintf(buf, sizeof(buf), "%s:%d", rl_conn_cur->host, rl_conn_cur->port);
		return buf;
	}

	/*
	 * In sentinel mode the standalone node has no address only until the
	 * Sentinels name the master (rl_sentinel.c points it there): named as
	 * rl_sentinel_endpoint names it before then.
	 */
	if (rl_redis_mode == RL_MODE_SENTINEL)
	{
		static char unnamed[600];

		snprintf(unnamed, sizeof(unnamed), "sentinel:%s", rl_sentinel_master);
		return unnamed;
	}
	if (rl_redis_socket[0] != '\0')
		snprintf(buf, sizeof(buf), "unix:%s", rl_redis_socket);
	else
		snprintf(buf, sizeof(buf), "%s:%d", rl_redis_host, rl_redis_port);
	if (rl_redis_db != 0)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "/%d", rl_redis_db);
	return buf;
}

/*
 * The server and version of the current node, or of any connected one,
 * as "valkey 8.0.1": Valkey reports redis_version 7.2.4 whatever it is,
 * so the bare number would misname it.
 */
const char *
rl_conn_server_version(void)
{
	static char buf[sizeof(((RlNode *) NULL)->server_name) +
					sizeof(((RlNode *) NULL)->server_version)];
	const RlNode *node = NULL;

	if (rl_conn_cur != NULL && rl_conn_cur->server_version[0] != '\0')
		node = rl_conn_cur;
	for (int i = 0; node == NULL && i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->server_version[0] != '\0')
			node = rl_nodes[i];
	}
	if (node == NULL)
		return NULL;
	snprintf(buf, sizeof(buf), "%s %s", node->server_name, node->server_version);
	return buf;
}

/*
 * The failure record of the current node (or the standalone node's), as
 * of now, for a check it leaves unanswered.  Its words are written again
 * only when a failure was recorded since: during an outage every check
 * asks, and two formatted strings a check would be most of what the
 * policy's answer costs.  A node's name changes only with its address or
 * the settings, which clear failure_filled (rl_node_set_address,
 * rl_nodes_forget).
 */
RlFailure *
rl_conn_current_failure(void)
{
	RlNode	   *node = rl_conn_cur != NULL ? rl_conn_cur : rl_standalone_node();

	node->failure.retry_at = node->retry_at;
	if (node->failure_filled != rl_failure_epoch + 1)
	{
		snprintf(node->failure.subject, sizeof(node->failure.subject),
				 "Redis server %s", rl_conn_endpoint());
		strlcpy(node->failure.what, rl_last_error, sizeof(node->failure.what));
		node->failure_filled = rl_failure_epoch + 1;
	}
	return &node->failure;
}

const char *
rl_conn_last_error(TimestampTz *at)
{
	*at = rl_last_error_at;
	return rl_last_error[0] != '\0' ? rl_last_error : NULL;
}

