/*-------------------------------------------------------------------------
 *
 * rl_conn.h
 *	  The backend's Redis connection and its interruptible I/O.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_conn.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <hiredis/hiredis.h>

#include "datatype/timestamp.h"

#include "ratelimit.h"

/* One Redis command, binary-safe. */
typedef struct RlCommand
{
	int			argc;
	const char **argv;
	size_t	   *argvlen;
} RlCommand;

extern bool rl_conn_ready(void);
extern bool rl_conn_roundtrip(RlCommand *cmds, int n, redisReply **replies,
							  TimestampTz deadline, bool flush_wal);
extern void rl_conn_failure(bool keep, const char *fmt,...) pg_attribute_printf(2, 3);
extern void rl_conn_misconfigured(const char *setting, const char *fmt,...) pg_attribute_printf(2, 3);
extern const char *rl_reply_setting(const char *reply);
extern void rl_conn_succeeded(void);
extern void rl_policy_answer(RlAnswer *answer);
extern void rl_free_replies(redisReply **replies, int n);
extern void rl_conn_drop(void);

/* What rl_status() shows. */
extern bool rl_conn_connected(void);
extern const char *rl_conn_endpoint(void);
extern const char *rl_conn_server_version(void);
extern const char *rl_conn_last_error(TimestampTz *at);

#endif							/* RL_CONN_H */
