/*-------------------------------------------------------------------------
 *
 * rl_trigger_slots.c
 *	  The statement trigger's check against a Redis Cluster: one script per
 *	  hash slot, a check round, then a consume round.
 *
 * A Lua script may touch keys of one hash slot only, and a statement's
 * keys are spread over many slots (and masters).  So in cluster mode
 * rl_check_groups hands its keys here.  They are grouped by slot, each
 * slot's keys (RL_STATEMENT_CHUNK at most per script) become one layered
 * script, and the scripts are pipelined per master, every master at once
 * (rl_run_scripts).
 *
 * - Keys in one script: that script is the whole check, all or nothing,
 *   exactly as in standalone mode.
 * - Keys in several scripts: two rounds.  First every script runs with
 *   the check-only marker ('?' in lua/layered.lua): nothing is consumed.
 *   If any refuses, the statement fails and no key was charged anywhere.
 *   Otherwise every script runs again to consume.  Another session may
 *   have consumed between the rounds, so a script can now refuse: the
 *   statement fails then, and the scripts that admitted stay charged.
 *   So a race can charge keys of a statement that was then refused, but
 *   never admits more than a limit: each script is still atomic and exact
 *   on its keys.
 *
 * A check-only script has no effect, so an unknown outcome in the first
 * round costs nothing; its scripts are not run again in the second round
 * (their master just failed), they get the failure policy's answer.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/trigger/rl_trigger_slots.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "rl_cluster.h"
#include "rl_scripts.h"
#include "rl_stats.h"
#include "rl_trigger.h"

/* Scripts per rl_run_scripts, as rl_allow_many's keys per round trip. */
#define RL_SLOTS_BATCH	1000

/* One script: keys first..first+n-1 of the slot-sorted order. */
typedef struct RlSlotScript
{
	int			first;
	int			n;
	RlAnswer	answer;
	int			tightest;		/* index into the caller's keys, or -1 */
} RlSlotScript;

static int	rl_slot_cmp(const void *a, const void *b, void *arg);

/* Sorts by slot, then by the key's place in the statement. */
static int
rl_slot_cmp(const void *a, const void *b, void *arg)
{
	const int  *slot = arg;
	int			ia = *(const int *) a;
	int			ib = *(const int *) b;

	if (slot[ia] != slot[ib])
		return slot[ia] < slot[ib] ? -1 : 1;
	return ia < ib ? -1 : (ia > ib);
}

/*
 * The layered script of one slot's keys, in its uniform form ('=', or
 * '?' to check only): keys, clock, marker, algorithm, limit, window,
 * capacity (the burst, or the limit), costs.
 */
static void
rl_slot_call(RlScriptCall *call, const RlLimiter *limiter, char **keys,
			 const int64 *costs, const int *order, const RlSlotScript *s,
			 bool check_only)
{
	int			p = 0;

	rl_script_call_init(call, RL_SCRIPT_LAYERED, s->n, 2 * s->n + 6);
	for (int k = 0; k < s->n; k++)
		rl_script_call_set(call, p++, keys[order[s->first + k]]);
	rl_script_call_set(call, p++, rl_clock_arg());
	rl_script_call_set(call, p++, check_only ? "?" : "=");
	rl_script_call_set(call, p++, rl_algorithm_name(limiter->algorithm));
	rl_script_call_set(call, p++, psprintf(INT64_FORMAT, limiter->limit));
	rl_script_call_set(call, p++, psprintf(INT64_FORMAT, limiter->window_us));
	rl_script_call_set(call, p++, psprintf(INT64_FORMAT, rl_capacity(limiter)));
	for (int k = 0; k < s->n; k++)
		rl_script_call_set(call, p++,
						   psprintf(INT64_FORMAT, costs[order[s->first + k]]));
}

/*
 * Runs the scripts marked in run[] (all when run is NULL), pipelined,
 * RL_SLOTS_BATCH per call of rl_run_scripts, and fills each one's answer
 * and tightest key.  A script Redis did not answer gets the policy's
 * answer (tightest -1).
 */
static void
rl_slots_round(const RlLimiter *limiter, char **keys, const int64 *costs,
			   const int *order, RlSlotScript *scripts, int nscripts,
			   const bool *run, bool check_only)
{
	RlScriptCall *calls = palloc(sizeof(RlScriptCall) * Min(nscripts, RL_SLOTS_BATCH));
	redisReply **replies = palloc(sizeof(redisReply *) * Min(nscripts, RL_SLOTS_BATCH));
	RlAnswer   *answers = palloc(sizeof(RlAnswer) * Min(nscripts, RL_SLOTS_BATCH));
	int		   *which = palloc(sizeof(int) * Min(nscripts, RL_SLOTS_BATCH));
	int			next = 0;

	while (next < nscripts)
	{
		int			m = 0;
		bool		malformed = false;

		CHECK_FOR_INTERRUPTS();
		for (; next < nscripts && m < RL_SLOTS_BATCH; next++)
		{
			if (run != NULL && !run[next])
				continue;
			rl_slot_call(&calls[m], limiter, keys, costs, order,
						 &scripts[next], check_only);
			which[m++] = next;
		}
		if (m == 0)
			break;
		memset(replies, 0, sizeof(redisReply *) * m);
		(void) rl_run_scripts(calls, m, replies);

		/* The fifth element names the key; rl_take_answers checks the rest. */
		for (int j = 0; j < m; j++)
		{
			RlSlotScript *s = &scripts[which[j]];
			redisReply *r = replies[j];

			s->tightest = -1;
			if (r == NULL)
				continue;
			if (r->type == REDIS_REPLY_ARRAY && r->elements >= 5 &&
				r->element[4]->type == REDIS_REPLY_INTEGER &&
				r->element[4]->integer >= 1 && r->element[4]->integer <= s->n)
				s->tightest = order[s->first + (int) r->element[4]->integer - 1];
			else
				malformed = true;
		}
		if (malformed)
		{
			rl_free_replies(replies, m);
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("unexpected reply from a rate limiter script")));
		}
		rl_take_answers(replies, m, answers);
		for (int j = 0; j < m; j++)
			scripts[which[j]].answer = answers[j];
	}
}

/*
 * The refusal that fails the statement, if any script refused: the known
 * refusal with the longest wait (after it every key admits), else the
 * first policy denial.  NULL when every script admitted.
 */
static RlSlotScript *
rl_slots_refusal(RlSlotScript *scripts, int nscripts, const bool *ran)
{
	RlSlotScript *worst = NULL;

	for (int i = 0; i < nscripts; i++)
	{
		RlSlotScript *s = &scripts[i];

		if ((ran != NULL && !ran[i]) || s->answer.allowed)
			continue;
		if (worst == NULL ||
			(s->answer.known && !worst->answer.known) ||
			(s->answer.known == worst->answer.known &&
			 s->answer.retry_after_ms > worst->answer.retry_after_ms))
			worst = s;
	}
	return worst;
}

/*
 * Fails the statement with the refusal s, unless shadow mode lets it by.
 * Redis's refusal is counted against its tightest key, as a standalone
 * statement's is (rl_check_rules); a policy answer names no key.
 */
static void
rl_slots_deny(RlTriggerConf *conf, RlGroup **list, const int *which,
			  char **keys, RlSlotScript *s)
{
	RlAnswer	answer = s->answer;

	rl_counters.denied++;
	if (s->tightest >= 0)
		rl_stats_denied(keys[s->tightest], conf->limiter.algorithm);
	rl_apply_enforce(&answer, 1);
	if (answer.allowed)
		return;
	rl_trigger_denied(conf,
					  s->tightest >= 0 ?
					  rl_group_desc(conf, list[which[s->tightest]]) : NULL,
					  &answer);
}

/*
 * Checks and consumes the n keys of a statement (keys[i] costs costs[i];
 * list[which[i]] is its group, for messages) against a Redis Cluster, as
 * the file's banner says, chunk keys at most per script.  One statement
 * counts as one call in rl_status().
 */
void
rl_check_slots(RlTriggerConf *conf, RlGroup **list, const int *which,
			   char **keys, const int64 *costs, int n, int chunk)
{
	int		   *slot = palloc(sizeof(int) * n);
	int		   *order = palloc(sizeof(int) * n);
	RlSlotScript *scripts = palloc(sizeof(RlSlotScript) * n);
	bool	   *consume;
	RlSlotScript *refusal;
	int			nscripts = 0;

	if (n == 0)
		return;
	for (int i = 0; i < n; i++)
	{
		slot[i] = rl_key_slot(keys[i], strlen(keys[i]));
		order[i] = i;
	}
	qsort_arg(order, n, sizeof(int), rl_slot_cmp, slot);
	for (int i = 0; i < n; i++)
	{
		if (nscripts == 0 ||
			slot[order[i]] != slot[order[scripts[nscripts - 1].first]] ||
			scripts[nscripts - 1].n == chunk)
		{
			scripts[nscripts].first = i;
			scripts[nscripts].n = 0;
			nscripts++;
		}
		scripts[nscripts - 1].n++;
	}

	rl_counters.calls++;
	consume = palloc(sizeof(bool) * nscripts);
	if (nscripts > 1)
	{
		/* Round 1: nothing is consumed; a refusal fails the statement. */
		rl_slots_round(&conf->limiter, keys, costs, order, scripts, nscripts,
					   NULL, true);
		refusal = rl_slots_refusal(scripts, nscripts, NULL);
		if (refusal != NULL)
		{
			rl_slots_deny(conf, list, which, keys, refusal);
			return;				/* shadow mode: nothing consumed */
		}
		/* A script the policy admitted was not answered: not run again. */
		for (int i = 0; i < nscripts; i++)
			consume[i] = scripts[i].answer.known;
	}
	else
		consume[0] = true;

	/* Round 2 (or the only one): consume. */
	rl_slots_round(&conf->limiter, keys, costs, order, scripts, nscripts,
				   consume, false);
	refusal = rl_slots_refusal(scripts, nscripts, consume);
	if (refusal != NULL)
	{
		if (nscripts > 1)
			elog(DEBUG1, "ratelimit: statement refused in the consume round of %d hash slot scripts",
				 nscripts);
		rl_slots_deny(conf, list, which, keys, refusal);
		return;
	}
	rl_counters.allowed++;
}
