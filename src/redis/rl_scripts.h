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

/* rl_engine.c: script replies into answers, the policy's per call */
extern void rl_take_answers(redisReply **replies, int n, RlAnswer *answers);
extern void rl_policy_answer_for(int i, int n, RlAnswer *answer);

#endif							/* RL_SCRIPTS_H */
