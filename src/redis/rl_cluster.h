/*-------------------------------------------------------------------------
 *
 * rl_cluster.h
 *	  Redis Cluster: hash slots, the slot map and redirects.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_cluster.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_CLUSTER_H
#define RL_CLUSTER_H

#include "rl_conn.h"

#define RL_CLUSTER_SLOTS	16384

/* Most redirects (MOVED, ASK, READONLY, TRYAGAIN) one command follows per call. */
#define RL_CLUSTER_MAX_HOPS	5

/* What an error reply asks of the client (rl_cluster_redirect). */
typedef enum RlRedirect
{
	RL_REDIRECT_NONE,
	RL_REDIRECT_MOVED,
	RL_REDIRECT_ASK,
	RL_REDIRECT_NO_ROOM			/* to a node this backend has no room for */
} RlRedirect;

extern int	rl_key_slot(const char *key, size_t len);
extern RlNode *rl_cluster_route(int slot, TimestampTz deadline);
extern RlRedirect rl_cluster_redirect(const char *err, const RlNode *from,
									  int *slot, RlNode **target);
extern void rl_cluster_moved(int slot, RlNode *node);
extern void rl_cluster_mark_stale(void);
extern void rl_cluster_reset(void);
extern const char *rl_cluster_endpoint(void);
extern int	rl_cluster_masters_now(RlNode **masters, int max, int *unserved,
								   TimestampTz deadline);

#endif							/* RL_CLUSTER_H */
