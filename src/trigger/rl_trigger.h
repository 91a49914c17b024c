/*-------------------------------------------------------------------------
 *
 * rl_trigger.h
 *	  What the row and statement triggers share.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/trigger/rl_trigger.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_TRIGGER_H
#define RL_TRIGGER_H

#include "commands/trigger.h"
#include "lib/stringinfo.h"

#include "rl_args.h"
#include "rl_postgrest.h"

/*
 * How a key column's value becomes key text (rl_trigger.c): each form
 * gives equal values one text whatever the session's settings.
 */
typedef enum RlKeyForm
{
	RL_KEY_OUTPUT,				/* the type's output: integers, text, ... */
	RL_KEY_BPCHAR,				/* output without trailing blanks */
	RL_KEY_NUMERIC,				/* output without trailing fraction zeros */
	RL_KEY_DATE,				/* ISO */
	RL_KEY_TIMESTAMP,			/* ISO */
	RL_KEY_TIMESTAMPTZ			/* ISO, in UTC */
} RlKeyForm;

/* A trigger's arguments, checked once per statement. */
typedef struct RlTriggerConf
{
	Oid			tgoid;			/* the trigger these belong to */
	char	   *trigger;		/* its name */
	Oid			relid;			/* the table the trigger was created on */
	char	   *table;			/* its name, schema-qualified, quoted */
	int			ncols;			/* key columns */
	AttrNumber *cols;
	char	  **colnames;		/* quoted as identifiers */
	FmgrInfo   *outfuncs;		/* their types' output functions */
	RlKeyForm  *forms;			/* how each becomes key text */
	RlLimiter	limiter;
	bool		skip;			/* on_deny = 'skip' */
	bool		after;			/* fired AFTER the row is written */
	AttrNumber	costcol;		/* 0: every row costs 1 */
	Oid			costtype;
	char	   *costname;
	/* The key and cost columns in relid, whose privileges messages obey. */
	AttrNumber *privcols;
	AttrNumber	privcost;
	void	   *statement;		/* the statement trigger's own state */
} RlTriggerConf;

/*
 * The rows of one key in a statement (rl_groups.c).  The first field is
 * the key of the hash table the group lives in.
 */
typedef struct RlGroup
{
	void	   *hashkey;
	char	   *key;			/* the limiter key, once made */
	Datum	   *values;			/* the key column values */
	bool	   *nulls;
	int64		cost;			/* the rows' summed cost */
} RlGroup;

typedef struct RlGroups RlGroups;

extern RlTriggerConf *rl_trigger_conf(FunctionCallInfo fcinfo,
									  TriggerData *trigdata);
extern void rl_trigger_key(RlTriggerConf *conf, TupleTableSlot *slot,
						   StringInfo key, StringInfo desc);
extern void rl_trigger_key_values(RlTriggerConf *conf, const Datum *values,
								  const bool *nulls, StringInfo key,
								  StringInfo desc);
extern int64 rl_trigger_cost(RlTriggerConf *conf, TupleTableSlot *slot);
extern int64 rl_trigger_cost_value(RlTriggerConf *conf, Datum value,
								   bool isnull);
extern bool rl_trigger_may_read(RlTriggerConf *conf, bool with_cost);
extern char *rl_trigger_redis_key(RlTriggerConf *conf, const char *key);
extern rl_noreturn void rl_trigger_raise(RlTriggerConf *conf, const char *detail,
										 const char *hint,
										 const RlAnswer *answer);
extern rl_noreturn void rl_trigger_denied(RlTriggerConf *conf, const char *desc,
										  const RlAnswer *answer);

/* rl_trigger_slots.c: a statement's keys against a Redis Cluster */

extern RlTriggerConf *rl_trigger_conf_copy(const RlTriggerConf *conf,
										   MemoryContext cxt);
extern void rl_trigger_check_table(const char *trigger, Relation rel,
								   bool transition);
extern void rl_trigger_hooks_init(void);

extern RlGroups *rl_groups_create(RlTriggerConf *conf, TupleDesc tupdesc,
								  MemoryContext parent);
extern MemoryContext rl_groups_context(RlGroups *groups);
extern void rl_groups_add(RlGroups *groups, RlTriggerConf *conf,
						  TupleTableSlot *slot, HeapTuple tuple);
extern RlGroup **rl_groups_finish(RlGroups *groups, RlTriggerConf *conf,
								  int *ngroups);
extern char *rl_group_desc(RlTriggerConf *conf, RlGroup *group);

#endif							/* RL_TRIGGER_H */
