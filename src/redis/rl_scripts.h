/*-------------------------------------------------------------------------
 *
 * rl_scripts.h
 *	  Running the embedded Lua scripts.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_scripts.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

#include "rl_conn.h"

/*
 * Script table indexes: one per algorithm, then the layered script, then
 * the refund script (lua/refund.lua).
 */
#define RL_SCRIPT_LAYERED	RL_NUM_ALGORITHMS
#define RL_SCRIPT_REFUND	(RL_NUM_ALGORITHMS + 1)
#define RL_NUM_SCRIPTS		(RL_NUM_ALGORITHMS + 2)

/* One script call: its keys, then its other arguments. */
typedef struct RlScriptCall
{
	int			script;			/* RlAlgorithm or RL_SCRIPT_LAYERED */
	int			nkeys;
	int			nparams;		/* keys + arguments */
	const char **params;
	size_t	   *paramlen;
} RlScriptCall;

extern bool rl_run_scripts(RlScriptCall *calls, int n, redisReply **replies);
extern bool rl_run_command(RlCommand *cmd, redisReply **reply);
extern RlNode *rl_scripts_call_node(int i, int n);
extern void rl_script_call_init(RlScriptCall *call, int script, int nkeys,
								int nparams);
extern void rl_script_call_set(RlScriptCall *call, int i, const char *value);


#endif							/* RL_SCRIPTS_H */
