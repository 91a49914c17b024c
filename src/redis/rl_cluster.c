/*-------------------------------------------------------------------------
 *
 * rl_cluster.c
 *	  Redis Cluster: hash slots, the slot map and redirects.
 *
 * In cluster mode (ratelimit.redis_mode = cluster) every limiter key goes
 * to the master that serves its hash slot.  A key's slot is the CRC16 of
 * its hash tag, the part between the first "{" and the next "}"; every key
 * of the extension is <prefix>{<db oid>:<key>}..., so the keys of one
 * limiter, and the rules of one layered call, always share a slot.
 *
 * The slot map comes from CLUSTER SLOTS, asked of a node this backend is
 * already connected to, or else of the seeds (ratelimit.redis_nodes, or
 * redis_host:redis_port when that is empty).  It is fetched on first use
 * and again, at most every RL_MAP_MIN_INTERVAL_MS, once something showed
 * it stale: a MOVED reply (whose slot is corrected at once), a READONLY
 * from a demoted master, or a failed node.  No periodic refresh is
 * needed: a wrong route costs one MOVED, never a wrong answer.
 *
 * This file only routes; the engine that sends commands and follows the
 * redirects is rl_scripts.c (rl_run_cluster), the links are rl_conn.h's.
 *
 * In redis/'s order (test/layers.sh's ORDER; rl_conn.c's banner) this
 * file calls only the link below it (rl_connect.c, rl_roundtrip.c,
 * rl_node.c), never rl_sentinel.c beside it: a failed node makes the map
 * stale through rl_node.c's failure count, not a call from below.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_cluster.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "rl_cluster.h"

/* Least time between two fetches of the slot map. */
#define RL_MAP_MIN_INTERVAL_MS	100

/* The master of each slot, or NULL when no node serves it (or unknown). */
static RlNode *rl_slot_node[RL_CLUSTER_SLOTS];
static bool rl_map_loaded = false;
static bool rl_map_stale = false;
static uint64 rl_map_failures_seen = 0;	/* rl_conn_failure_epoch() then */
static TimestampTz rl_map_fetched_at = 0;
static int	rl_map_masters = 0;

/*
 * CRC16-XMODEM (polynomial 0x1021, initial value 0), as the cluster
 * specification's HASH_SLOT uses: CRC16("123456789") is 0x31C3.
 */
static uint16
rl_crc16(const unsigned char *buf, size_t len)
{
	uint16		crc = 0;

	for (size_t i = 0; i < len; i++)
	{
		crc ^= (uint16) buf[i] << 8;
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) : (uint16) (crc << 1);
	}
	return crc;
}

/*
 * The hash slot of a key: only its hash tag is hashed when it has one (a
 * "{" followed, after at least one byte, by a "}").
 */
int
rl_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL)
	{
		size_t		start = open - key + 1;
		const char *close = memchr(key + start, '}', len - start);

		if (close != NULL && close > key + start)
			return rl_crc16((const unsigned char *) key + start,
							close - (key + start)) & (RL_CLUSTER_SLOTS - 1);
	}
	return rl_crc16((const unsigned char *) key, len) & (RL_CLUSTER_SLOTS - 1);
}

/*
 * Asks one node for CLUSTER SLOTS, by the deadline, and, on a well-formed
 * answer, makes it the slot map.  The nodes of the old map that the new
 * one does not name are let go of (rl_conn_keep_nodes), so a backend that
 * outlives many node addresses (masters restarted elsewhere) never fills
 * its registry.  False if the node could not answer (the failure is
 * recorded on it) or is not a cluster node.
 */
static bool
rl_cluster_fetch(RlNode *node, TimestampTz deadline)
{
	const char *argv[2] = {"CLUSTER", "SLOTS"};
	size_t		argvlen[2] = {7, 5};
	RlCommand	cmd = {2, argv, argvlen};
	redisReply *reply = NULL;
	bool		ok;
	const char *hosts[RL_MAX_NODES];	/* the masters' distinct addresses */
	int			ports[RL_MAX_NODES];
	RlNode	   *owners[RL_MAX_NODES];
	int		   *owner_of;		/* range i's master: index into hosts */
	int			nowners = 0;

	if (!rl_node_open(node, NULL))
		return false;
	rl_conn_large_replies(true);
	PG_TRY();
	{
		ok = rl_node_roundtrip(node, &cmd, 1, &reply, deadline, false);
	}
	PG_FINALLY();
	{
		rl_conn_large_replies(false);
	}
	PG_END_TRY();
	if (!ok)
		return false;

	if (reply->type == REDIS_REPLY_ERROR)
	{
		char		msg[200];

		strlcpy(msg, reply->str, sizeof(msg));
		freeReplyObject(reply);
		if (strstr(msg, "cluster support disabled") != NULL)
			rl_conn_misconfigured("ratelimit.redis_mode",
								  "the Redis server is not a cluster node: %s", msg);
		else
			rl_conn_failure(RL_FAILED_UNAVAILABLE, true, "Redis refused CLUSTER SLOTS: %s", msg);
		return false;
	}

	/* Checked whole, and its masters' addresses gathered, before any use. */
	ok = reply->type == REDIS_REPLY_ARRAY;
	owner_of = palloc(sizeof(int) * Max(reply->elements, 1));
	for (size_t i = 0; ok && i < reply->elements; i++)
	{
		redisReply *range = reply->element[i];
		redisReply *master;
		const char *host;
		int			port;
		int			k;

		if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
			range->element[0]->type != REDIS_REPLY_INTEGER ||
			range->element[1]->type != REDIS_REPLY_INTEGER ||
			range->element[2]->type != REDIS_REPLY_ARRAY ||
			range->element[2]->elements < 2 ||
			range->element[2]->element[0]->type != REDIS_REPLY_STRING ||
			range->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
		{
			ok = false;
			break;
		}
		master = range->element[2];
		if (range->element[0]->integer < 0 ||
			range->element[1]->integer >= RL_CLUSTER_SLOTS ||
			range->element[0]->integer > range->element[1]->integer ||
			master->element[1]->integer < 1 || master->element[1]->integer > 65535)
		{
			ok = false;
			break;
		}
		/* No address ("" or "?"): the node we asked, per the spec. */
		host = master->element[0]->str;
		if (host[0] == '\0' || strcmp(host, "?") == 0)
			host = rl_node_host(node);
		port = (int) master->element[1]->integer;
		for (k = 0; k < nowners; k++)
		{
			if (ports[k] == port && strcmp(hosts[k], host) == 0)
				break;
		}
		if (k == nowners)
		{
			if (nowners == RL_MAX_NODES)
			{
				pfree(owner_of);
				freeReplyObject(reply);
				rl_conn_failure(RL_FAILED_UNAVAILABLE, true, "the cluster has more than %d masters",
								RL_MAX_NODES);
				return false;
			}
			hosts[nowners] = host;
			ports[nowners++] = port;
		}
		owner_of[i] = k;
	}
	if (!ok)
	{
		pfree(owner_of);
		freeReplyObject(reply);
		rl_conn_drop();
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "unexpected reply from Redis to CLUSTER SLOTS");
		return false;
	}

	/*
	 * Room for the new masters: the nodes no longer named go.  The old map
	 * names some of them, so it is gone first (an ERROR from here on, out
	 * of memory, leaves no map rather than one naming freed nodes).
	 */
	memset(rl_slot_node, 0, sizeof(rl_slot_node));
	rl_map_loaded = false;
	rl_conn_keep_nodes(hosts, ports, nowners);
	for (int k = 0; k < nowners; k++)
	{
		owners[k] = rl_node_lookup(hosts[k], ports[k]);
		Assert(owners[k] != NULL);	/* RL_MAX_NODES at most, all kept */
	}
	for (size_t i = 0; i < reply->elements; i++)
	{
		redisReply *range = reply->element[i];

		for (long long s = range->element[0]->integer;
			 s <= range->element[1]->integer; s++)
			rl_slot_node[s] = owners[owner_of[i]];
	}
	freeReplyObject(reply);
	pfree(owner_of);

	rl_counters.map_refreshes++;
	rl_map_loaded = true;
	rl_map_stale = false;
	rl_map_failures_seen = rl_conn_failure_epoch();
	rl_map_masters = nowners;
	elog(DEBUG1, "ratelimit: slot map fetched from %s:%d, %d masters",
		 rl_node_host(node), rl_node_port(node), rl_map_masters);
	return true;
}

/*
 * Fetches the slot map: first from the nodes of the current map that are
 * connected and well, then from the seeds, within the calling call's one
 * deadline (its command_timeout): every CLUSTER SLOTS ends by then, and
 * no node is asked once it has passed, so masters that stall cost the
 * call its deadline once, not once each.  One connect_timeout also covers
 * the search, so a list of dead seeds costs at most that.  What the call
 * cannot route then gets the policy's answer.  True when a map was
 * fetched.
 */
static bool
rl_cluster_refresh(TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz budget = Min(deadline,
							 TimestampTzPlusMilliseconds(now, rl_connect_timeout));
	char	   *hosts[RL_MAX_NODES];
	int			ports[RL_MAX_NODES];
	char		why[256];
	int			n;

	rl_map_fetched_at = now;
	if (rl_map_loaded)
	{
		for (int s = 0; s < RL_CLUSTER_SLOTS; s++)
		{
			RlNode	   *node = rl_slot_node[s];

			if (node == NULL || (s > 0 && node == rl_slot_node[s - 1]) ||
				!rl_node_connected(node) || rl_node_resting(node))
				continue;
			if (GetCurrentTimestamp() >= deadline)
				return false;
			if (rl_cluster_fetch(node, deadline))
				return true;
		}
	}

	if (rl_redis_nodes[0] != '\0')
		n = rl_parse_nodes(rl_redis_nodes, hosts, ports, RL_MAX_NODES,
								   why, sizeof(why));
	else
	{
		hosts[0] = rl_redis_host;
		ports[0] = rl_redis_port;
		n = 1;
	}
	for (int i = 0; i < n; i++)
	{
		RlNode	   *seed = rl_node_lookup(hosts[i], ports[i]);

		if (seed == NULL || rl_node_resting(seed))
			continue;
		if (GetCurrentTimestamp() >= budget)
			break;
		if (rl_cluster_fetch(seed, deadline))
			return true;
	}
	return false;
}

/*
 * The master that serves a slot, fetching the map first when it is
 * missing or known stale, by the call's deadline.  NULL when no node
 * serves the slot: the failure is then recorded, and the caller gives the
 * policy's answer.
 */
RlNode *
rl_cluster_route(int slot, TimestampTz deadline)
{
	bool		may_fetch = !rl_map_loaded ||
		TimestampDifferenceExceeds(rl_map_fetched_at, GetCurrentTimestamp(),
								   RL_MAP_MIN_INTERVAL_MS);
	RlNode	   *node;

	if (may_fetch && (!rl_map_loaded || rl_map_stale ||
					  rl_map_failures_seen != rl_conn_failure_epoch() ||
					  rl_slot_node[slot] == NULL))
		(void) rl_cluster_refresh(deadline);
	if (!rl_map_loaded)
		return NULL;			/* every seed failed; recorded there */
	node = rl_slot_node[slot];
	if (node == NULL)
	{
		rl_cluster_mark_stale();
		rl_conn_set_current(rl_standalone_node());	/* the failure's subject */
		rl_conn_failure(RL_FAILED_UNAVAILABLE, true, "no node of the cluster serves hash slot %d", slot);
	}
	return node;
}

/*
 * rl_ping: the masters of a slot map fetched now, by the deadline, into
 * masters[0..return), in the order of their first slot; *unserved is the
 * number of slots no master serves.  -1 when no node gave a map (the
 * failure is recorded on the last one asked).
 */
int
rl_cluster_masters_now(RlNode **masters, int max, int *unserved,
					   TimestampTz deadline)
{
	int			n = 0;

	*unserved = 0;
	if (!rl_cluster_refresh(deadline))
		return -1;
	for (int s = 0; s < RL_CLUSTER_SLOTS; s++)
	{
		RlNode	   *node = rl_slot_node[s];
		int			k;

		if (node == NULL)
		{
			(*unserved)++;
			continue;
		}
		for (k = 0; k < n && masters[k] != node; k++)
			;
		if (k == n && n < max)
			masters[n++] = node;
	}
	return n;
}

/*
 * Reads a MOVED or ASK error: "MOVED <slot> <host>:<port>", the host empty
 * when it is the one the command went to.  NONE for any other error, or
 * a malformed redirect (the caller treats it as the error it is); NO_ROOM,
 * with the slot, when the target is a node this backend cannot take on
 * (RL_MAX_NODES known already): an outage for those keys, not misuse.
 */
RlRedirect
rl_cluster_redirect(const char *err, const RlNode *from, int *slot,
					RlNode **target)
{
	RlRedirect	kind;
	const char *p;
	const char *colon;
	char	   *end;
	long		s;
	long		port;
	char		host[256];
	size_t		hostlen;

	if (strncmp(err, "MOVED ", 6) == 0)
	{
		kind = RL_REDIRECT_MOVED;
		p = err + 6;
	}
	else if (strncmp(err, "ASK ", 4) == 0)
	{
		kind = RL_REDIRECT_ASK;
		p = err + 4;
	}
	else
		return RL_REDIRECT_NONE;

	s = strtol(p, &end, 10);
	if (end == p || *end != ' ' || s < 0 || s >= RL_CLUSTER_SLOTS)
		return RL_REDIRECT_NONE;
	p = end + 1;
	colon = strrchr(p, ':');
	if (colon == NULL)
		return RL_REDIRECT_NONE;
	port = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || port < 1 || port > 65535)
		return RL_REDIRECT_NONE;
	hostlen = colon - p;
	if (hostlen > 0 && p[0] == '[' && p[hostlen - 1] == ']')
	{
		p++;
		hostlen -= 2;
	}
	if (hostlen >= sizeof(host))
		return RL_REDIRECT_NONE;
	if (hostlen == 0)
		strlcpy(host, rl_node_host(from), sizeof(host));
	else
	{
		memcpy(host, p, hostlen);
		host[hostlen] = '\0';
	}
	*target = rl_node_lookup(host, (int) port);
	*slot = (int) s;
	return *target != NULL ? kind : RL_REDIRECT_NO_ROOM;
}

/* A MOVED: the slot is served elsewhere now, and likely others with it. */
void
rl_cluster_moved(int slot, RlNode *node)
{
	rl_slot_node[slot] = node;
	rl_map_stale = true;
}

/* Something showed the map may be wrong: fetch it before trusting it again. */
void
rl_cluster_mark_stale(void)
{
	rl_map_stale = true;
}

/* Forgets the map (its nodes are being forgotten: the settings changed). */
void
rl_cluster_reset(void)
{
	memset(rl_slot_node, 0, sizeof(rl_slot_node));
	rl_map_loaded = false;
	rl_map_stale = false;
	rl_map_failures_seen = rl_conn_failure_epoch();
	rl_map_fetched_at = 0;
	rl_map_masters = 0;
}

/* "cluster:<seeds> (N masters)" for rl_status(). */
const char *
rl_cluster_endpoint(void)
{
	static char buf[600];

	if (rl_redis_nodes[0] != '\0')
		snprintf(buf, sizeof(buf), "cluster:%s", rl_redis_nodes);
	else
		snprintf(buf, sizeof(buf), "cluster:%s:%d", rl_redis_host, rl_redis_port);
	if (rl_map_loaded)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), " (%d masters)",
				 rl_map_masters);
	return buf;
}
