/*-------------------------------------------------------------------------
 *
 * rl_conn.h
 *	  A backend's link to Redis nodes: the calls the rest of the extension makes.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_conn.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <hiredis/hiredis.h>

#include "datatype/timestamp.h"

#include "rl_guc.h"
#include "rl_stats.h"
#include "rl_store.h"

/* One Redis command, binary-safe. */
/*
 * Keys of a batch per script (lua/layered.lua's '*' form): like a
 * statement's chunk, a script of 64 keys holds other clients back for a
 * millisecond or two at most.
 */
#define RL_BATCH_KEYS	64

typedef struct RlCommand
{
	int			argc;
	const char **argv;
	size_t	   *argvlen;
} RlCommand;

/* One Redis server this backend talks to (rl_node.h). */
typedef struct RlNode RlNode;

/*
 * What one node lost or refuses of the scripts (rl_scripts.c): the next
 * pipeline to it loads them first, once per node, not once per call.
 */
typedef struct RlNodeScripts
{
	bool		functions_refused;	/* the ACL refused FCALL or FUNCTION LOAD */
	bool		needs_library;	/* FCALL answered "Function not found" */
	uint32		needs_scripts;	/* bit per script: EVALSHA answered NOSCRIPT */
} RlNodeScripts;

/* Cluster nodes one backend may know at a time. */

extern bool rl_conn_begin(void);
extern bool rl_conn_ready(void);
extern bool rl_conn_resting(void);
extern RlNode *rl_standalone_node(void);
extern RlNode *rl_node_lookup(const char *host, int port);
extern void rl_conn_keep_nodes(const char *const *hosts, const int *ports,
							   int n);
extern bool rl_node_ready(RlNode *node);
extern bool rl_node_open(RlNode *node, bool *opened);
extern bool rl_sentinel_guarded(void);
extern RlNodeScripts *rl_node_scripts(RlNode *node);
extern bool rl_node_has_functions(const RlNode *node);
extern bool rl_node_roundtrip(RlNode *node, RlCommand *cmds, int n,
							  redisReply **replies, TimestampTz deadline,
							  bool overlap);
extern bool rl_node_send(RlNode *node, RlCommand *cmds, int n);
extern bool rl_node_receive(RlNode *node, redisReply **replies, int n,
							TimestampTz deadline);
extern void rl_nodes_receive(RlNode **nodes, int nn, bool *ok,
							 redisReply **replies, const int *start,
							 const int *nb, TimestampTz deadline);
extern void rl_conn_discard_busy(void);
extern void rl_conn_wait_work(void);
extern void rl_conn_set_wait_work(void (*work) (void));
extern bool rl_node_connected(const RlNode *node);
extern bool rl_node_resting(const RlNode *node);
extern const char *rl_node_host(const RlNode *node);
extern int	rl_node_port(const RlNode *node);
extern void rl_conn_set_current(RlNode *node);
extern void rl_conn_large_replies(bool on);
extern RlNode *rl_sentinel_lookup(const char *host, int port);
extern void rl_node_set_address(RlNode *node, const char *host, int port);
extern const char *rl_node_failure(const RlNode *node, const char **setting);
extern bool rl_conn_roundtrip(RlCommand *cmds, int n, redisReply **replies,
							  TimestampTz deadline, bool overlap);
extern void rl_conn_failure(RlFailReason reason, bool keep, const char *fmt,...) pg_attribute_printf(3, 4);
extern void rl_conn_slot_failure(const char *fmt,...) pg_attribute_printf(1, 2);
extern void rl_conn_misconfigured(const char *setting, const char *fmt,...) pg_attribute_printf(2, 3);
extern const char *rl_reply_setting(const char *reply);
extern const char *rl_sentinel_reply_setting(const char *reply);
extern void rl_reply_text(const char *reply, char *buf, size_t len);
extern void rl_conn_succeeded(void);
extern uint64 rl_conn_failure_epoch(void);
extern TimestampTz rl_conn_current_retry_at(void);
extern void rl_free_replies(redisReply **replies, int n);
extern void rl_conn_drop(void);
extern void rl_conn_wake(void);

/* rl_ping() on the Redis store (rl_probe.c). */
extern int	rl_redis_probe(RlProbeRow *rows, int max, RlProbeFailure *failure);

/* What rl_status() shows. */
extern bool rl_conn_connected(void);
extern const char *rl_conn_endpoint(void);
extern const char *rl_conn_status_endpoint(void);
extern const char *rl_conn_server_version(void);
extern const char *rl_conn_last_error(TimestampTz *at);
extern RlFailure *rl_conn_current_failure(void);

#endif							/* RL_CONN_H */
