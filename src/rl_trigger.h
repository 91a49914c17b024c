/*-------------------------------------------------------------------------
 *
 * rl_trigger.h
 *	  What the row and statement triggers share.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_trigger.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_TRIGGER_H
#define RL_TRIGGER_H

#include "commands/trigger.h"
#include "lib/stringinfo.h"

#include "ratelimit.h"

/* A trigger's arguments, checked once per statement. */
typedef struct RlTriggerConf
{
	Oid			tgoid;			/* the trigger these belong to */
	char	   *trigger;		/* its name */
	char	   *table;			/* schema-qualified, quoted as needed */
	int			ncols;			/* key columns */
	AttrNumber *cols;
	char	  **colnames;		/* quoted as identifiers */
	FmgrInfo   *outfuncs;		/* their types' output functions */
	RlLimiter	limiter;
	bool		skip;			/* on_deny = 'skip' */
	AttrNumber	costcol;		/* 0: every row costs 1 */
	Oid			costtype;
	char	   *costname;
} RlTriggerConf;

extern RlTriggerConf *rl_trigger_conf(FunctionCallInfo fcinfo,
									  TriggerData *trigdata);
extern void rl_trigger_key(RlTriggerConf *conf, TupleTableSlot *slot,
						   StringInfo key, StringInfo desc);
extern void rl_trigger_key_values(RlTriggerConf *conf, const Datum *values,
								  const bool *nulls, StringInfo key,
								  StringInfo desc);
extern int64 rl_trigger_cost(RlTriggerConf *conf, TupleTableSlot *slot);
extern char *rl_trigger_redis_key(RlTriggerConf *conf, const char *key);
extern void rl_trigger_raise(RlTriggerConf *conf, const char *detail,
							 const char *hint,
							 const RlAnswer *answer) pg_attribute_noreturn();
extern void rl_trigger_denied(RlTriggerConf *conf, const char *desc,
							  const RlAnswer *answer) pg_attribute_noreturn();

#endif							/* RL_TRIGGER_H */
