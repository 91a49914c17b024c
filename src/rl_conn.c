/*-------------------------------------------------------------------------
 *
 * rl_conn.c
 *	  A backend's link to one Redis node and its interruptible I/O.
 *
 * A node (RlNode) is one Redis server: the standalone server of the
 * settings, or one master of a Redis Cluster (rl_cluster.c finds them).
 * Each backend opens one connection per node, lazily on first use, and
 * keeps it across calls and transactions.  hiredis runs in non-blocking mode and
 * never waits itself: every wait happens here, in a WaitEventSet that also
 * watches the process latch and the postmaster, so query cancel,
 * statement_timeout and pg_terminate_backend interrupt a stalled Redis at
 * once, and a dead postmaster ends the backend.
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
 * is set and a WARNING is logged (rate-limited).  What a call is answered
 * meanwhile, and the WARNING's words for it, are the engine's
 * (rl_engine.c: rl_policy_answer, rl_policy_words).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <hiredis/sds.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "rl_cluster.h"
#include "rl_conn.h"
#include "rl_link.h"
#include "rl_sentinel.h"
#include "rl_stats.h"

/* Time between two WARNINGs about an unavailable Redis, per backend. */
#define RL_WARNING_INTERVAL_MS	60000

/* Longest password accepted from ratelimit.redis_password_file. */
#define RL_MAX_PASSWORD_BYTES	1024

/*
 * No reply to a command of ours is an array of more than five elements (a
 * layered script's answer; 64 leaves room) or larger than INFO's few
 * kilobytes.  hiredis
 * allocates an array's element table when it reads the header, so a peer
 * that claims *2147483647 would make this backend allocate 16 GB and, on
 * giving up, walk it for seconds where no cancel reaches; a bulk length
 * of 4 GB would have it buffer whatever arrives.  Larger replies are
 * refused as a protocol error.
 */
#define RL_MAX_REPLY_ELEMENTS	64
#define RL_MAX_REPLY_BYTES		(1024 * 1024)

/*
 * CLUSTER SLOTS is the one larger reply: an array of one entry per slot
 * range, at most 16384, each a few hundred bytes.
 */
#define RL_MAX_LARGE_ELEMENTS	(RL_CLUSTER_SLOTS + 1)
#define RL_MAX_LARGE_BYTES		(16 * 1024 * 1024)

/* One Redis server and this backend's link to it. */
struct RlNode
{
	char	   *host;			/* NULL for the standalone node */
	int			port;
	redisContext *ctx;
	SSL		   *ssl;			/* the TLS session over ctx's socket, or NULL */
	WaitEventSet *waitset;
	int			sock_pos;
	uint32		sock_events;
	bool		busy;			/* a command is out, its reply unread */
	TimestampTz retry_at;		/* no attempt before then */
	TimestampTz last_warning;
	int64		unwarned;
	char		server_version[32];
	RlNodeScripts scripts;		/* what it lost or refuses (rl_scripts.c) */
	instr_time	sent_at;		/* the round trip out, for rl_stats_rtt */

	bool		sentinel;		/* a Redis Sentinel, asked for the master */
	const char *sentinel_setting;	/* its last failure, kept quiet: */
	char		sentinel_error[200];	/* rl_sentinel.c reports the sum */
};

/* Every node this backend knows; [0] is the standalone node. */
static RlNode *rl_nodes[RL_MAX_NODES + 1];
static int	rl_num_nodes = 0;

/* The node the failure bookkeeping acts on (see the file's banner). */
static RlNode *rl_cur = NULL;

/* Replies larger than RL_MAX_REPLY_* are accepted (CLUSTER SLOTS). */
static bool rl_large_replies = false;

/*
 * The rl_settings_generation the open connections (or the last attempt)
 * were made under; 0 before the first call.
 */
static uint64 rl_conn_generation = 0;

/* Failure state shown by rl_status(). */
static char rl_last_error[256] = "";
static TimestampTz rl_last_error_at = 0;
static bool rl_exit_registered = false;

/* hiredis's reply builders, with arrays bounded (see RL_MAX_REPLY_ELEMENTS). */
static redisReplyObjectFunctions rl_reply_functions;
static void *(*rl_hiredis_create_array) (const redisReadTask *, int) = NULL;
static int	rl_refused_elements = 0;

/* hiredis's createArray, refusing tables no reply of ours needs. */
static void *
rl_create_array(const redisReadTask *task, int elements)
{
	if (elements > (rl_large_replies ? RL_MAX_LARGE_ELEMENTS : RL_MAX_REPLY_ELEMENTS))
	{
		rl_refused_elements = elements;
		return NULL;			/* hiredis: a protocol error, nothing allocated */
	}
	return rl_hiredis_create_array(task, elements);
}

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
static void
rl_discard(RlNode *node)
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
	node->server_version[0] = '\0';
}

/* Drops every node's connection. */
static void
rl_discard_all(void)
{
	for (int i = 0; i < rl_num_nodes; i++)
		rl_discard(rl_nodes[i]);
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
	rl_discard(node);
	if (node->host != NULL)
		pfree(node->host);
	node->host = host != NULL ? MemoryContextStrdup(TopMemoryContext, host) : NULL;
	node->port = port;
	node->retry_at = 0;
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
	rl_cur = rl_num_nodes > 0 ? rl_nodes[0] : NULL;
	rl_cluster_reset();
}

/* Lets the next round trips accept replies up to RL_MAX_LARGE_*. */
void
rl_conn_large_replies(bool on)
{
	rl_large_replies = on;
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
	rl_cur = node;
}

/*
 * The password setting that serves node: the Sentinels' own, or Redis's;
 * its _file form when that is set (it then wins over the value).
 */
static const char *
rl_password_setting(const RlNode *node)
{
	if (node != NULL && node->sentinel)
		return rl_sentinel_password_file[0] != '\0' ?
			"ratelimit.sentinel_password_file" : "ratelimit.sentinel_password";
	return rl_redis_password_file[0] != '\0' ?
		"ratelimit.redis_password_file" : "ratelimit.redis_password";
}

/*
 * The password to send to rl_cur, into buf: the first line of the
 * password file when one is set (redis_password_file, or for a Sentinel
 * sentinel_password_file), else the password setting.  The file is read
 * afresh at each connection, so a new password needs no reload; it is
 * refused unless only its owner may read it, as libpq refuses a .pgpass
 * that group or others can read.  False, with the reason in "why", when
 * the password cannot be used; no reason ever quotes the file's content.
 */
static bool
rl_password(char *buf, size_t size, char *why, size_t whysize)
{
	bool		sentinel = rl_cur != NULL && rl_cur->sentinel;
	const char *path = sentinel ? rl_sentinel_password_file : rl_redis_password_file;
	const char *value = sentinel ? rl_sentinel_password : rl_redis_password;
	const char *setting = rl_password_setting(rl_cur);
	struct stat st;
	int			fd;
	ssize_t		n;
	size_t		len;

	if (path[0] == '\0')
	{
		if (strlen(value) > size - 2)
		{
			snprintf(why, whysize, "%s is longer than %d bytes",
					 setting, (int) size - 2);
			return false;
		}
		strlcpy(buf, value, size);
		return true;
	}

	/* O_NONBLOCK: a FIFO named here must not hang the backend in open(). */
	fd = OpenTransientFile(path, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		snprintf(why, whysize, "could not open %s \"%s\": %s",
				 setting, path, strerror(errno));
		return false;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
	{
		snprintf(why, whysize, "%s \"%s\" is not a regular file",
				 setting, path);
		CloseTransientFile(fd);
		return false;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		snprintf(why, whysize,
				 "%s \"%s\" has group or world access (mode %04o); it must be u=rw (0600) or less",
				 setting, path, (unsigned int) (st.st_mode & 07777));
		CloseTransientFile(fd);
		return false;
	}
	n = read(fd, buf, size - 1);
	CloseTransientFile(fd);
	if (n < 0)
	{
		snprintf(why, whysize, "could not read %s \"%s\": %s",
				 setting, path, strerror(errno));
		return false;
	}
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	if (len == (size_t) n && n == (ssize_t) size - 1)
	{
		explicit_bzero(buf, size);
		snprintf(why, whysize,
				 "the first line of %s \"%s\" is longer than %d bytes",
				 setting, path, (int) size - 2);
		return false;
	}
	explicit_bzero(buf + len, size - len);
	if (len == 0)
	{
		snprintf(why, whysize, "the first line of %s \"%s\" is empty",
				 setting, path);
		return false;
	}
	return true;
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
rl_record_failure(bool keep, const char *setting, const char *what)
{
	TimestampTz now = GetCurrentTimestamp();
	RlNode	   *node = rl_cur != NULL ? rl_cur : rl_standalone_node();

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
			rl_discard(node);
		return;
	}
	if (rl_redis_mode == RL_MODE_SENTINEL)
		rl_sentinel_mark_stale();	/* ask again before using a master */

	if (setting != NULL)
		snprintf(rl_last_error, sizeof(rl_last_error),
				 "misconfigured (%s): %s", setting, what);
	else
		strlcpy(rl_last_error, what, sizeof(rl_last_error));
	rl_last_error_at = now;
	rl_counters.failures++;
	rl_stats_failure(setting, what);
	node->retry_at = TimestampTzPlusMilliseconds(now, rl_retry_interval);
	if (!keep)
		rl_discard(node);
	if (rl_redis_mode == RL_MODE_CLUSTER)
		rl_cluster_mark_stale();

	if (node->last_warning == 0 ||
		TimestampDifferenceExceeds(node->last_warning, now, RL_WARNING_INTERVAL_MS))
	{
		ereport(WARNING,
				(setting != NULL ?
				 errcode(ERRCODE_CONFIG_FILE_ERROR) :
				 errcode(ERRCODE_CONNECTION_FAILURE),
				 setting != NULL ?
				 errmsg("ratelimit cannot use Redis server %s: check %s; %s",
						rl_conn_endpoint(), setting, rl_policy_words()) :
				 errmsg("Redis server %s is unavailable; %s",
						rl_conn_endpoint(), rl_policy_words()),
				 errdetail_internal("%s", rl_last_error),
				 node->unwarned > 0 ?
				 errhint("%lld further failures were not reported; see rl_status().",
						 (long long) node->unwarned) : 0));
		node->last_warning = now;
		node->unwarned = 0;
	}
	else
		node->unwarned++;
}

/* An outage: Redis is down, stalled or cannot serve now. */
void
rl_conn_failure(bool keep, const char *fmt,...)
{
	va_list		args;
	char		what[sizeof(rl_last_error)];

	va_start(args, fmt);
	vsnprintf(what, sizeof(what), fmt, args);
	va_end(args);
	rl_record_failure(keep, NULL, what);
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
	RlNode	   *node = rl_cur != NULL ? rl_cur : rl_standalone_node();
	TimestampTz retry_at = node->retry_at;

	va_start(args, fmt);
	vsnprintf(what, sizeof(what), fmt, args);
	va_end(args);
	rl_record_failure(true, NULL, what);
	node->retry_at = retry_at;
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
	rl_record_failure(false, setting, what);
}

/*
 * The setting a refusal from Redis points at, or NULL when it is Redis's
 * state rather than ours (LOADING, max clients ...).
 */
const char *
rl_reply_setting(const char *reply)
{
	if (rl_cur != NULL && rl_cur->sentinel)
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
 * The setting a failed connect points at: a socket path that is not there
 * or may not be opened, or a host name that does not resolve.  A refused
 * connection is an outage (nothing listens there now).
 */
static const char *
rl_connect_setting(const RlNode *node, const char *errstr)
{
	if (node->host != NULL)
	{
		/* A cluster node: a seed of redis_nodes, or an address it gave. */
		if (strstr(errstr, "Name or service not known") != NULL ||
			strstr(errstr, "No address associated") != NULL)
			return "ratelimit.redis_nodes";
		return NULL;
	}
	if (rl_redis_socket[0] != '\0')
	{
		char		dir[MAXPGPATH];
		struct stat st;

		if (strstr(errstr, "Permission denied") != NULL ||
			strstr(errstr, "Not a directory") != NULL)
			return "ratelimit.redis_socket";

		/*
		 * Redis removes its socket when it stops, so a missing socket in a
		 * directory that is there is a server being restarted; a missing
		 * directory is a wrong path.
		 */
		if (strstr(errstr, "No such file") != NULL)
		{
			strlcpy(dir, rl_redis_socket, sizeof(dir));
			get_parent_directory(dir);
			if (stat(dir[0] != '\0' ? dir : "/", &st) != 0 || !S_ISDIR(st.st_mode))
				return "ratelimit.redis_socket";
		}
		return NULL;
	}
	/* A name that does not resolve; a failing resolver is an outage. */
	if (strstr(errstr, "Name or service not known") != NULL ||
		strstr(errstr, "No address associated") != NULL)
		return "ratelimit.redis_host";
	return NULL;
}

/*
 * When the current node may be tried again (0: at once), for the failure
 * policy's closed answer, which tells the caller how long to wait.
 */
TimestampTz
rl_conn_current_retry_at(void)
{
	return rl_cur != NULL ? rl_cur->retry_at : 0;
}

/* A successful round trip ends a run of failures. */
void
rl_conn_succeeded(void)
{
	if (rl_cur == NULL)
		return;
	rl_cur->retry_at = 0;
	rl_cur->last_warning = 0;
	rl_cur->unwarned = 0;
}

/*
 * Waits until the socket is ready for "events" or the deadline passes;
 * false on timeout.  Interrupts are served here: a cancel or terminate
 * throws out of this loop, and the caller's PG_CATCH drops the connection.
 * A deadline that has passed still gets one look at the socket, so that a
 * reply which arrived meanwhile (while the WAL was flushed, say) is read
 * rather than thrown away with the link.
 */
static bool
rl_wait(RlNode *node, uint32 events, TimestampTz deadline)
{
	if (events != node->sock_events)
	{
		ModifyWaitEvent(node->waitset, node->sock_pos, events, NULL);
		node->sock_events = events;
	}

	for (;;)
	{
		WaitEvent	event;
		long		timeout;

		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (WaitEventSetWait(node->waitset, Max(timeout, 0), &event, 1,
							 PG_WAIT_EXTENSION) == 0)
		{
			if (timeout <= 0)
				return false;
			continue;			/* timed out: the next pass sees it */
		}
		if (event.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (event.events & events)
			return true;
	}
}

/* The socket event a link step asked for (rl_link.h). */
static uint32
rl_io_events(RlIo io)
{
	return io == RL_IO_WANT_WRITE ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;
}

/*
 * Records a broken link whose reason may be a TLS setting of ours (a
 * client certificate the server refused, a server not speaking TLS).
 */
static void
rl_link_failed(RlNode *node, const char *what)
{
	const char *setting = node->ssl != NULL ? rl_tls_error_setting() : NULL;

	if (setting != NULL)
		rl_conn_misconfigured(setting, "%s: %s", what, node->ctx->errstr);
	else
		rl_conn_failure(false, "%s: %s", what, node->ctx->errstr);
}

/* Writes everything hiredis has buffered. */
static bool
rl_flush(RlNode *node, TimestampTz deadline)
{
	for (;;)
	{
		RlIo		io = rl_link_write(node->ctx, node->ssl);

		if (io == RL_IO_ERROR)
		{
			rl_link_failed(node, "could not send to Redis");
			return false;
		}
		if (io == RL_IO_DONE)
			return true;
		if (!rl_wait(node, rl_io_events(io), deadline))
		{
			rl_conn_failure(false, "timed out sending to Redis");
			return false;
		}
	}
}

/*
 * Work a caller wants done while Redis runs its commands (the statement
 * trigger's WAL flush, rl_trigger_statement.c): run once the commands are
 * written, before the wait for their replies, so that the two overlap.
 * The I/O layer does not know what it is; NULL is nothing.
 */
static void (*rl_wait_work) (void) = NULL;

/* Sets the work to overlap with the waits for Redis; NULL clears it. */
void
rl_conn_set_wait_work(void (*work) (void))
{
	rl_wait_work = work;
}

/* The text of the first error reply among replies[0..n), or NULL. */
static const char *
rl_first_error(redisReply **replies, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (replies[i] != NULL && replies[i]->type == REDIS_REPLY_ERROR)
			return replies[i]->str;
	}
	return NULL;
}

/*
 * Records a broken link.  A server that refuses a client (max clients,
 * for one) replies with an error and closes at once, so the rest of a
 * pipelined batch fails with a reset: the error it did send says far
 * more than the reset does.
 */
static void
rl_link_broken(RlNode *node, redisReply **replies, int got, const char *what)
{
	const char *said = rl_first_error(replies, got);

	if (rl_refused_elements > 0)
		rl_conn_failure(false, "Redis sent an array of %d elements, more than any reply to the extension's commands has",
						rl_refused_elements);
	else if (said != NULL)
		rl_conn_failure(false, "Redis closed the connection after replying: %s",
						said);
	else
		rl_link_failed(node, what);
}

/* Reads n replies, in order. */
static bool
rl_read(RlNode *node, redisReply **replies, int n, TimestampTz deadline)
{
	redisContext *ctx = node->ctx;
	size_t		limit = rl_large_replies ? RL_MAX_LARGE_BYTES : RL_MAX_REPLY_BYTES;
	uint32		want = WL_SOCKET_READABLE;

	for (int i = 0; i < n; i++)
	{
		void	   *reply = NULL;
		RlIo		io;

		for (;;)
		{
			if (redisGetReplyFromReader(ctx, &reply) == REDIS_ERR)
			{
				rl_link_broken(node, replies, i, "could not parse Redis reply");
				return false;
			}
			if (reply != NULL)
				break;
			if (!rl_wait(node, want, deadline))
			{
				rl_conn_failure(false, "timed out waiting for Redis reply");
				return false;
			}
			io = rl_link_read(ctx, node->ssl, limit);
			if (io == RL_IO_ERROR)
			{
				rl_link_broken(node, replies, i, "could not receive from Redis");
				return false;
			}
			want = rl_io_events(io);
			if (ctx->reader->len - ctx->reader->pos > limit)
			{
				rl_conn_failure(false, "Redis sent a reply of more than %d bytes, more than any reply to the extension's commands has",
								(int) limit);
				return false;
			}
		}
		replies[i] = (redisReply *) reply;
	}

	/*
	 * Bytes after the last reply answer no command of ours: the peer is out
	 * of step (or not Redis), so none of these replies can be trusted to be
	 * the answer to its command.
	 */
	if (ctx->reader->pos < ctx->reader->len)
	{
		rl_conn_failure(false, "Redis sent more replies than commands");
		return false;
	}
	return true;
}

void
rl_free_replies(redisReply **replies, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (replies[i] != NULL)
			freeReplyObject(replies[i]);
		replies[i] = NULL;
	}
}

/*
 * Sends n commands in one write and reads their n replies: one network
 * round trip however many commands.  False when Redis could not be
 * reached in time; the connection is then gone and the failure recorded.
 * Replies are hiredis objects; the caller frees them.  With overlap the
 * caller's wait work (rl_conn_set_wait_work) runs while the reply is on
 * its way.
 */
bool
rl_node_roundtrip(RlNode *node, RlCommand *cmds, int n, redisReply **replies,
				  TimestampTz deadline, bool overlap)
{
	for (int i = 0; i < n; i++)
		replies[i] = NULL;
	if (!rl_node_send(node, cmds, n))
		return false;

	/*
	 * An ERROR here leaves the link busy: the next call drops it
	 * (rl_conn_begin), since its replies were never read.
	 */
	if (overlap)
		rl_conn_wait_work();
	return rl_node_receive(node, replies, n, deadline);
}

/*
 * The first half of a round trip on several nodes: queues n commands on
 * the node and writes what its socket takes now, without waiting, so that
 * every node gets its pipeline before any reply is waited for.  False
 * (recorded, link dropped) when the commands could not be queued or the
 * link broke.  rl_node_receive completes it.
 */
bool
rl_node_send(RlNode *node, RlCommand *cmds, int n)
{
	rl_cur = node;
	Assert(node->ctx != NULL && !node->busy);
	rl_stats_rtt_start(&node->sent_at);
	for (int i = 0; i < n; i++)
	{
		if (redisAppendCommandArgv(node->ctx, cmds[i].argc, cmds[i].argv,
								   cmds[i].argvlen) != REDIS_OK)
		{
			rl_conn_failure(false, "could not queue Redis command: %s",
							node->ctx->errstr);
			return false;
		}
	}
	node->busy = true;
	if (rl_link_write(node->ctx, node->ssl) == RL_IO_ERROR)
	{
		rl_link_failed(node, "could not send to Redis");
		return false;
	}
	return true;
}

/*
 * The second half: writes what is left and reads the n replies, by the
 * deadline shared by every node of the call.  A deadline that passed
 * while other nodes were waited for still gives each socket one look, so
 * replies that are there are taken.  False as rl_node_roundtrip.
 */
bool
rl_node_receive(RlNode *node, redisReply **replies, int n,
				TimestampTz deadline)
{
	bool		ok = false;

	rl_cur = node;
	for (int i = 0; i < n; i++)
		replies[i] = NULL;
	PG_TRY();
	{
		ok = rl_flush(node, deadline) && rl_read(node, replies, n, deadline);
	}
	PG_CATCH();
	{
		rl_free_replies(replies, n);
		rl_discard(node);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ok)
	{
		rl_free_replies(replies, n);
		return false;
	}
	node->busy = false;
	rl_stats_rtt_end(&node->sent_at);
	return true;
}

/*
 * One step of a node in rl_nodes_receive: writes what is left of its
 * pipeline, or reads what has arrived and takes the replies that are
 * complete.  Returns the socket event to wait for next, 0 once all n
 * replies are in, or -1 when the link failed (recorded, dropped).
 */
static int
rl_node_step(RlNode *node, redisReply **replies, int n, int *have)
{
	redisContext *ctx = node->ctx;
	size_t		limit = rl_large_replies ? RL_MAX_LARGE_BYTES : RL_MAX_REPLY_BYTES;
	RlIo		io;

	rl_cur = node;
	if (sdslen(ctx->obuf) > 0)
	{
		io = rl_link_write(ctx, node->ssl);
		if (io == RL_IO_ERROR)
		{
			rl_link_failed(node, "could not send to Redis");
			return -1;
		}
		return io == RL_IO_DONE ? WL_SOCKET_READABLE : rl_io_events(io);
	}
	io = rl_link_read(ctx, node->ssl, limit);
	if (io == RL_IO_ERROR)
	{
		rl_link_broken(node, replies, *have, "could not receive from Redis");
		return -1;
	}
	if (ctx->reader->len - ctx->reader->pos > limit)
	{
		rl_conn_failure(false, "Redis sent a reply of more than %d bytes, more than any reply to the extension's commands has",
						(int) limit);
		return -1;
	}
	while (*have < n)
	{
		void	   *reply = NULL;

		if (redisGetReplyFromReader(ctx, &reply) == REDIS_ERR)
		{
			rl_link_broken(node, replies, *have, "could not parse Redis reply");
			return -1;
		}
		if (reply == NULL)
			return rl_io_events(io);
		replies[(*have)++] = (redisReply *) reply;
	}
	/* Bytes after the last reply: see rl_read. */
	if (ctx->reader->pos < ctx->reader->len)
	{
		rl_conn_failure(false, "Redis sent more replies than commands");
		return -1;
	}
	node->busy = false;
	rl_stats_rtt_end(&node->sent_at);
	return 0;
}

/*
 * A wait set of the latch, the postmaster and the socket of every node
 * still in "events" (0: done), in CurrentMemoryContext; NULL when the
 * backend has no descriptor left for its epoll instance.
 */
static WaitEventSet *
rl_nodes_waitset(RlNode **nodes, int nn, const uint32 *events)
{
	WaitEventSet *set;

	if (!AcquireExternalFD())
		return NULL;
	set = CreateWaitEventSet(CurrentMemoryContext, nn + 2);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int k = 0; k < nn; k++)
	{
		if (events[k] != 0)
			AddWaitEventToSet(set, events[k], nodes[k]->ctx->fd, NULL,
							  (void *) (intptr_t) k);
	}
	return set;
}

/*
 * The second half of a round trip on several nodes at once: one wait on
 * every node's socket (rl_node_send wrote what each took then), writing
 * the rest of a pipeline where a socket takes more and reading whatever
 * node has replies, so that a slow or stalled node costs only its own
 * keys, and a pipeline larger than a socket's buffer does not wait for
 * the nodes before it.  ok[k] says on entry that node k's pipeline went
 * out and on return that its nb[k] replies are in replies[start[k]...];
 * a node that broke or missed the one deadline is recorded and dropped
 * (its keys get the policy's answer; nothing is sent again).  The wait
 * set is made again when a node leaves it, and freed on every path: a
 * cancel or statement_timeout throws out of here, and the caller drops
 * every link left busy.
 */
void
rl_nodes_receive(RlNode **nodes, int nn, bool *ok, redisReply **replies,
				 const int *start, const int *nb, TimestampTz deadline)
{
	uint32	   *events = palloc0(sizeof(uint32) * nn);
	int		   *have = palloc0(sizeof(int) * nn);
	WaitEvent  *occurred = palloc(sizeof(WaitEvent) * (nn + 2));
	WaitEventSet *volatile set = NULL;
	int			active = 0;

	for (int k = 0; k < nn; k++)
	{
		for (int i = 0; i < nb[k]; i++)
			replies[start[k] + i] = NULL;
		if (!ok[k])
			continue;
		events[k] = sdslen(nodes[k]->ctx->obuf) > 0 ?
			WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;
		active++;
	}

	PG_TRY();
	{
		while (active > 0)
		{
			long		timeout;
			int			got;
			bool		changed = false;

			if (set == NULL)
			{
				set = rl_nodes_waitset(nodes, nn, events);
				if (set == NULL)
				{
					/* No descriptor for the set: one node at a time. */
					for (int k = 0; k < nn; k++)
					{
						if (events[k] == 0)
							continue;
						ok[k] = rl_node_receive(nodes[k],
												replies + start[k] + have[k],
												nb[k] - have[k], deadline);
						if (!ok[k])
							rl_free_replies(replies + start[k], nb[k]);
					}
					break;
				}
			}
			timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
			got = WaitEventSetWait(set, Max(timeout, 0), occurred, nn + 2,
								   PG_WAIT_EXTENSION);
			if (got == 0 && timeout <= 0)
			{
				for (int k = 0; k < nn; k++)
				{
					if (events[k] == 0)
						continue;
					rl_cur = nodes[k];
					rl_free_replies(replies + start[k], nb[k]);
					rl_conn_failure(false, sdslen(nodes[k]->ctx->obuf) > 0 ?
									"timed out sending to Redis" :
									"timed out waiting for Redis reply");
					ok[k] = false;
					events[k] = 0;
				}
				break;
			}
			for (int e = 0; e < got; e++)
			{
				int			k;
				int			next;

				if (occurred[e].events & WL_LATCH_SET)
				{
					ResetLatch(MyLatch);
					CHECK_FOR_INTERRUPTS();
					continue;
				}
				k = (int) (intptr_t) occurred[e].user_data;
				if (events[k] == 0 || !(occurred[e].events & events[k]))
					continue;
				next = rl_node_step(nodes[k], replies + start[k], nb[k], &have[k]);
				if (next <= 0)
				{
					if (next < 0)
					{
						rl_free_replies(replies + start[k], nb[k]);
						ok[k] = false;
					}
					events[k] = 0;
					active--;
					changed = true;
				}
				else if ((uint32) next != events[k])
				{
					events[k] = next;
					ModifyWaitEvent(set, occurred[e].pos, next, NULL);
				}
			}
			if (changed)
			{
				FreeWaitEventSet(set);
				set = NULL;
				ReleaseExternalFD();
			}
		}
	}
	PG_FINALLY();
	{
		if (set != NULL)
		{
			FreeWaitEventSet(set);
			ReleaseExternalFD();
		}
	}
	PG_END_TRY();
	pfree(events);
	pfree(have);
	pfree(occurred);
}

/* Drops every link whose reply is still out (after an ERROR mid-call). */
void
rl_conn_discard_busy(void)
{
	for (int i = 0; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->busy)
			rl_discard(rl_nodes[i]);
	}
}

/* Runs the caller's wait work (rl_conn_set_wait_work), if any. */
void
rl_conn_wait_work(void)
{
	if (rl_wait_work != NULL)
		rl_wait_work();
}

/* A round trip on the current node (rl_conn_ready readied it). */
bool
rl_conn_roundtrip(RlCommand *cmds, int n, redisReply **replies,
				  TimestampTz deadline, bool overlap)
{
	return rl_node_roundtrip(rl_cur, cmds, n, replies, deadline, overlap);
}

/*
 * An idle connection that Redis closed (idle timeout, CLIENT KILL, restart)
 * shows as readable with nothing or an error to read.  Checking before
 * sending costs one non-blocking recv and lets us reconnect safely, since
 * nothing was sent on the dead link.
 */
static bool
rl_link_is_stale(RlNode *node)
{
	return !rl_link_idle_ok(node->ctx, node->ssl);	/* EOF, an error, or stray bytes */
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
 * True when the node may have Functions: Redis 7.0 or later, or a version
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

/* Pulls "redis_version:x.y.z" out of an INFO server reply. */
static void
rl_parse_version(RlNode *node, const char *info)
{
	const char *p = strstr(info, "redis_version:");
	size_t		len;

	node->server_version[0] = '\0';
	if (p == NULL)
		return;
	p += strlen("redis_version:");
	len = strcspn(p, "\r\n");
	if (len >= sizeof(node->server_version))
		len = sizeof(node->server_version) - 1;
	memcpy(node->server_version, p, len);
	node->server_version[len] = '\0';
}

/*
 * The TLS handshake over the node's connected socket, waited for on the
 * latch under the connect deadline.  False (recorded) when it fails: a
 * certificate that did not verify, a file that cannot be used, or a peer
 * that does not speak TLS is a configuration error naming the setting;
 * a timeout or a reset is an outage.
 */
static bool
rl_tls_connect(RlNode *node, TimestampTz deadline)
{
	const char *setting = NULL;
	char		why[256];

	if (!rl_tls_prepare(&setting, why, sizeof(why)))
	{
		if (setting != NULL)
			rl_conn_misconfigured(setting, "%s", why);
		else
			rl_conn_failure(false, "%s", why);
		return false;
	}
	node->ssl = rl_tls_start(node->ctx, rl_node_host(node));
	if (node->ssl == NULL)
	{
		rl_conn_failure(false, "could not start TLS: %s", node->ctx->errstr);
		return false;
	}
	for (;;)
	{
		RlIo		io = rl_tls_handshake(node->ssl, node->ctx);

		if (io == RL_IO_DONE)
			return true;
		if (io == RL_IO_ERROR)
		{
			setting = rl_tls_error_setting();
			if (setting != NULL)
				rl_conn_misconfigured(setting, "TLS handshake failed: %s",
									  node->ctx->errstr);
			else
				rl_conn_failure(false, "TLS handshake failed: %s",
								node->ctx->errstr);
			return false;
		}
		if (!rl_wait(node, rl_io_events(io), deadline))
		{
			rl_conn_failure(false, "timed out in the TLS handshake with Redis (a server that does not speak TLS on this port waits like this too)");
			return false;
		}
	}
}

/*
 * Opens the connection: a non-blocking connect waited for under
 * connect_timeout, the TLS handshake when redis_tls is on, then AUTH, SELECT, CLIENT SETNAME and INFO in one round
 * trip.  The client name (pg:<database oid>:<pid>) tells an operator which
 * backend a Redis client belongs to.  Secrets never reach a message.
 */
static bool
rl_connect(RlNode *node)
{
	TimestampTz deadline;
	redisContext *c;
	const char *argv[4][4];
	size_t		argvlen[4][4];
	RlCommand	cmds[4];
	redisReply *replies[4];
	int			n = 0;
	int			optional;
	bool		connected;
	int			err = 0;
	socklen_t	errlen = sizeof(err);
	char		db[16];
	char		name[64];
	char		password[RL_MAX_PASSWORD_BYTES + 2];
	char		why[256];
	bool		ok;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_connect_timeout);
	rl_cur = node;

	if (!rl_exit_registered)
	{
		on_proc_exit(rl_at_exit, (Datum) 0);
		rl_exit_registered = true;
	}

	if (!rl_password(password, sizeof(password), why, sizeof(why)))
	{
		rl_conn_misconfigured(rl_password_setting(node), "%s", why);
		return false;
	}

	/*
	 * The socket and the wait set's epoll descriptor both count against
	 * the backend's budget of external descriptors, which postgres_fdw and
	 * dblink share.  Both are reserved first, so that a backend out of
	 * descriptors is an outage for the policy to answer, not an ERROR from
	 * inside CreateWaitEventSet; the second goes back just before the wait
	 * set takes it.
	 */
	if (!AcquireExternalFD())
	{
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(false, "could not connect to Redis: too many open files");
		return false;
	}
	if (!AcquireExternalFD())
	{
		ReleaseExternalFD();
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(false, "could not connect to Redis: too many open files");
		return false;
	}
	if (node->host != NULL)
		c = redisConnectNonBlock(node->host, node->port);
	else if (rl_redis_socket[0] != '\0')
		c = redisConnectUnixNonBlock(rl_redis_socket);
	else
		c = redisConnectNonBlock(rl_redis_host, rl_redis_port);
	if (c == NULL || c->err)
	{
		char		msg[128];

		strlcpy(msg, c != NULL ? c->errstr : "out of memory", sizeof(msg));
		if (c != NULL)
			redisFree(c);
		ReleaseExternalFD();
		ReleaseExternalFD();
		explicit_bzero(password, sizeof(password));
		if (rl_connect_setting(node, msg) != NULL)
			rl_conn_misconfigured(rl_connect_setting(node, msg),
								  "could not connect to Redis: %s", msg);
		else
			rl_conn_failure(false, "could not connect to Redis: %s", msg);
		return false;
	}
	node->ctx = c;
	rl_counters.connects++;
	if (rl_hiredis_create_array == NULL)
	{
		rl_reply_functions = *c->reader->fn;
		rl_hiredis_create_array = rl_reply_functions.createArray;
		rl_reply_functions.createArray = rl_create_array;
	}
	c->reader->fn = &rl_reply_functions;
	rl_refused_elements = 0;

	/*
	 * Building the wait set can still fail (epoll_create1 itself, out of
	 * memory): the ERROR must not leave a connection without one behind.
	 */
	ReleaseExternalFD();
	PG_TRY();
	{
		node->waitset = CreateWaitEventSet(TopMemoryContext, 3);
		AddWaitEventToSet(node->waitset, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch,
						  NULL);
		AddWaitEventToSet(node->waitset, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
						  NULL, NULL);
		node->sock_pos = AddWaitEventToSet(node->waitset, WL_SOCKET_WRITEABLE,
										   c->fd, NULL, NULL);
		node->sock_events = WL_SOCKET_WRITEABLE;
		connected = rl_wait(node, WL_SOCKET_WRITEABLE, deadline);
	}
	PG_CATCH();
	{
		explicit_bzero(password, sizeof(password));
		rl_discard(node);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!connected)
	{
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(false, "timed out connecting to Redis");
		return false;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) != 0 || err != 0)
	{
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(false, "could not connect to Redis: %s",
						strerror(err != 0 ? err : errno));
		return false;
	}
	if (rl_redis_tls)
	{
		PG_TRY();
		{
			ok = rl_tls_connect(node, deadline);
		}
		PG_CATCH();
		{
			/* A half-done handshake must not be taken for a link. */
			explicit_bzero(password, sizeof(password));
			rl_discard(node);
			PG_RE_THROW();
		}
		PG_END_TRY();
		if (!ok)
		{
			explicit_bzero(password, sizeof(password));
			return false;
		}
	}

	/* The handshake, one round trip. */
	if (password[0] != '\0')
	{
		int			k = 0;

		argv[n][k++] = "AUTH";
		if ((node->sentinel ? rl_sentinel_username : rl_redis_username)[0] != '\0')
			argv[n][k++] = node->sentinel ? rl_sentinel_username : rl_redis_username;
		argv[n][k++] = password;
		cmds[n].argc = k;
		n++;
	}
	/* A cluster has only database 0 (rl_conn_begin checked it is so). */
	if (rl_redis_db != 0 && !node->sentinel && rl_redis_mode != RL_MODE_CLUSTER)
	{
		snprintf(db, sizeof(db), "%d", rl_redis_db);
		argv[n][0] = "SELECT";
		argv[n][1] = db;
		cmds[n].argc = 2;
		n++;
	}
	snprintf(name, sizeof(name), "pg:%u:%d", MyDatabaseId, MyProcPid);
	optional = n;
	argv[n][0] = "CLIENT";
	argv[n][1] = "SETNAME";
	argv[n][2] = name;
	cmds[n].argc = 3;
	n++;
	argv[n][0] = "INFO";
	argv[n][1] = "server";
	cmds[n].argc = 2;
	n++;
	for (int i = 0; i < n; i++)
	{
		for (int k = 0; k < cmds[i].argc; k++)
			argvlen[i][k] = strlen(argv[i][k]);
		cmds[i].argv = argv[i];
		cmds[i].argvlen = argvlen[i];
	}

	PG_TRY();
	{
		ok = rl_node_roundtrip(node, cmds, n, replies, deadline, false);
	}
	PG_FINALLY();
	{
		explicit_bzero(password, sizeof(password));
	}
	PG_END_TRY();
	if (!ok)
		return false;
	for (int i = 0; i < n; i++)
	{
		/*
		 * CLIENT SETNAME and INFO only label the connection: an ACL user
		 * with just the commands the scripts need may run neither, a
		 * server may have renamed them away, and the limiter works
		 * without them.
		 */
		if (i >= optional && replies[i]->type == REDIS_REPLY_ERROR &&
			(strncmp(replies[i]->str, "NOPERM", 6) == 0 ||
			 strncmp(replies[i]->str, "ERR unknown command", 19) == 0))
			continue;
		if (replies[i]->type == REDIS_REPLY_ERROR)
		{
			/*
			 * A wrong password or database is ours to fix; max clients,
			 * LOADING ... are the server's state.
			 */
			char		msg[200];
			const char *setting;

			strlcpy(msg, replies[i]->str, sizeof(msg));
			rl_free_replies(replies, n);
			setting = rl_reply_setting(msg);
			if (setting != NULL)
				rl_conn_misconfigured(setting, "Redis refused the connection: %s", msg);
			else
				rl_conn_failure(false, "Redis refused the connection: %s", msg);
			return false;
		}

		/*
		 * AUTH, SELECT and CLIENT SETNAME answer +OK, INFO a bulk string:
		 * anything else comes from a peer out of step, or not Redis.
		 */
		if (replies[i]->type != (i == n - 1 ? REDIS_REPLY_STRING : REDIS_REPLY_STATUS))
		{
			rl_free_replies(replies, n);
			rl_conn_failure(false, "unexpected reply to %s from Redis", argv[i][0]);
			return false;
		}
	}
	if (replies[n - 1]->type == REDIS_REPLY_STRING)
		rl_parse_version(node, replies[n - 1]->str);
	rl_free_replies(replies, n);

	/*
	 * The scripts call TIME before writing, which needs the effects
	 * replication of Redis 5, and set several hash fields at once (Redis
	 * 4): an older server would fail every call with a script error.
	 */
	if (node->server_version[0] != '\0' && atoi(node->server_version) < 5)
	{
		char		version[sizeof(node->server_version)];

		strlcpy(version, node->server_version, sizeof(version));
		rl_discard(node);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("Redis server %s runs Redis %s, which is too old",
						rl_conn_endpoint(), version),
				 errhint("ratelimit needs Redis 5.0 or later.")));
	}
	return true;
}

/*
 * Settings are safe only when the library is loaded in the postmaster.
 * Loaded later, in a backend, its settings are placeholders until then:
 * any role could read the password, and a role's connection options
 * (PGOPTIONS) would be refused at load but would already have replaced
 * the configured values, leaving the built-in defaults (fail open, the
 * default endpoint and prefix).  So, like pg_stat_statements, refuse to
 * work unless preloaded; it is an ERROR, never a policy answer.
 */
void
rl_require_preload(void)
{
	if (!rl_preloaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit must be loaded via shared_preload_libraries"),
				 errdetail("Loaded later, its settings could be read or reset by any role before the library loads."),
				 errhint("Add 'ratelimit' to shared_preload_libraries and restart the server.")));
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
	rl_cur = rl_standalone_node();

	/* A command cut short by an error left its reply unread: drop it. */
	for (int i = 0; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->ctx != NULL && rl_nodes[i]->busy)
			rl_discard(rl_nodes[i]);
	}

	/*
	 * New endpoint, mode or credentials (rl_guc.c's assign hooks count the
	 * changes): reconnect, and try them at once.
	 */
	if (rl_conn_generation != rl_settings_generation)
	{
		rl_discard_all();
		rl_tls_forget();
		rl_forget_cluster_nodes();
		rl_node_set_address(rl_nodes[0], NULL, 0);
		rl_sentinel_reset();
		rl_nodes[0]->retry_at = 0;
		memset(&rl_nodes[0]->scripts, 0, sizeof(RlNodeScripts));
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
	if (rl_redis_tls && rl_redis_socket[0] != '\0' &&
		rl_redis_mode == RL_MODE_STANDALONE)
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
 * Makes sure the node has a usable connection, and makes it the current
 * node.  False means the node is unavailable for this call: inside its
 * retry interval after a failure, or a connection attempt that just
 * failed (recorded).
 */
bool
rl_node_ready(RlNode *node)
{
	rl_cur = node;
	if (node->retry_at != 0 && GetCurrentTimestamp() < node->retry_at)
		return false;

	if (node->ctx != NULL && rl_link_is_stale(node))
		rl_discard(node);
	if (node->ctx == NULL)
	{
		if (!rl_connect(node))
			return false;
		/* A master the Sentinels named must say it is one (ROLE). */
		if (rl_redis_mode == RL_MODE_SENTINEL && node == rl_nodes[0])
			return rl_sentinel_confirm_role(node);
	}
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
 * Drops the connection after a reply of the wrong shape: the peer is out of
 * step (or not Redis), so its next reply cannot be trusted either.
 */
void
rl_conn_drop(void)
{
	if (rl_cur != NULL)
		rl_discard(rl_cur);
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

/*
 * The current node as host:port (or the socket path, and database),
 * never credentials: the server a message is about.
 */
const char *
rl_conn_endpoint(void)
{
	static char buf[512];

	if (rl_cur != NULL && rl_cur->host != NULL)
	{
		snprintf(buf, sizeof(buf), "%s:%d", rl_cur->host, rl_cur->port);
		return buf;
	}
	if (rl_redis_mode == RL_MODE_SENTINEL)
		return rl_sentinel_endpoint();
	if (rl_redis_socket[0] != '\0')
		snprintf(buf, sizeof(buf), "unix:%s", rl_redis_socket);
	else
		snprintf(buf, sizeof(buf), "%s:%d", rl_redis_host, rl_redis_port);
	if (rl_redis_db != 0)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "/%d", rl_redis_db);
	return buf;
}

/* The version of the current node, or of any connected one. */
const char *
rl_conn_server_version(void)
{
	if (rl_cur != NULL && rl_cur->server_version[0] != '\0')
		return rl_cur->server_version;
	for (int i = 0; i < rl_num_nodes; i++)
	{
		if (rl_nodes[i]->server_version[0] != '\0')
			return rl_nodes[i]->server_version;
	}
	return NULL;
}

const char *
rl_conn_last_error(TimestampTz *at)
{
	*at = rl_last_error_at;
	return rl_last_error[0] != '\0' ? rl_last_error : NULL;
}
