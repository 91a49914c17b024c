/*-------------------------------------------------------------------------
 *
 * rl_node.h
 *	  One Redis node and this backend's link to it (internal to the link layer).
 *
 * Shared by the four files of a backend's link to Redis, and by nothing
 * else: rl_node.c keeps the nodes and their failures, rl_roundtrip.c runs
 * the round trips, rl_connect.c opens a node's connection, rl_conn.c
 * readies the nodes for a call (bottom first: each calls only the ones
 * before it).  Everything else goes through rl_conn.h.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_node.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_NODE_H
#define RL_NODE_H

#include <openssl/ssl.h>

#include "portability/instr_time.h"
#include "storage/latch.h"

#include "rl_cluster.h"
#include "rl_conn.h"
#include "rl_link.h"

/*
 * No reply to a command of ours is an array of more than six elements
 * per key of a batch's script (RL_BATCH_KEYS keys) or larger than INFO's
 * few kilobytes.  hiredis allocates an array's element table when it reads
 * the header, so a peer that claims *2147483647 would make this backend
 * allocate 16 GB and, on giving up, walk it for seconds where no cancel
 * reaches; a bulk length of 4 GB would have it buffer whatever arrives.
 * Larger replies are refused as a protocol error.
 */
#define RL_MAX_REPLY_ELEMENTS	(6 * RL_BATCH_KEYS)
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
	RlFailure	failure;		/* its last failure, for the policy */
	uint64		failure_filled; /* failure's words as of epoch - 1; 0: never */
	char		server_name[16];	/* "redis", "valkey": INFO's server_name */
	char		server_version[32]; /* that product's own version */
	RlNodeScripts scripts;		/* what it lost or refuses (rl_scripts.c) */
	instr_time	sent_at;		/* the round trip out, for rl_stats_rtt */

	RlNode	   *next_retired;	/* rl_node.c's list of nodes let go of */

	bool		sentinel;		/* a Redis Sentinel, asked for the master */
	const char *sentinel_setting;	/* its last failure, kept quiet: */
	char		sentinel_error[200];	/* rl_sentinel.c reports the sum */
};

/* The node the failure bookkeeping acts on (rl_node.c's banner). */
extern RlNode *rl_conn_cur;

/* Replies larger than RL_MAX_REPLY_* are accepted (CLUSTER SLOTS). */
extern bool rl_large_replies;

/* The element count of an array reply refused by rl_connect.c's bound. */
extern int	rl_refused_elements;

/* What keeps the Redis password from a master that is not ours. */
typedef enum RlSentinelGuard
{
	RL_GUARD_UNNEEDED,			/* no Redis password to keep */
	RL_GUARD_TLS,				/* TLS verifies the master: our CA or name */
	RL_GUARD_SENTINEL_AUTH,		/* the Sentinels require a password */
	RL_GUARD_MISSING			/* neither: sentinel mode is refused */
} RlSentinelGuard;

extern void rl_node_discard(RlNode *node);	/* rl_node.c */
extern void rl_nodes_begin(void);	/* rl_node.c */
extern void rl_nodes_forget(void);	/* rl_node.c */
extern void rl_nodes_close_at_exit(void);	/* rl_node.c */
extern bool rl_node_connect(RlNode *node);	/* rl_connect.c */
extern RlSentinelGuard rl_sentinel_guard(void);	/* rl_connect.c */
extern void rl_sentinel_refuse_open(void);	/* rl_connect.c */
extern bool rl_node_wait(RlNode *node, uint32 events, TimestampTz deadline);	/* rl_roundtrip.c */
extern uint32 rl_node_io_events(RlIo io);	/* rl_roundtrip.c */

#endif							/* RL_NODE_H */
