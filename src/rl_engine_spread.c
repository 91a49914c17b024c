/*-------------------------------------------------------------------------
 *
 * rl_engine_spread.c
 *	  A statement's keys: RL_STATEMENT_CHUNK to a check, and across a
 *	  store's partitions (Redis Cluster's hash slots) one check per
 *	  partition, a check round, then a consume round.
 *
 * A Lua script may touch keys of one hash slot only, and a statement's
 * keys are spread over many slots (and masters).  So when the store has
 * partitions (RlStoreOps.partition), rl_engine_check_statement (at the
 * end of this file) hands its keys to rl_engine_spread.  They are grouped by partition, each partition's keys (chunk
 * at most per check) become one check of uniform rules, and the checks go
 * to the store together (it pipelines them per master, every master at
 * once).
 *
 * - Keys in one check: that check is the whole statement, all or nothing,
 *   exactly as with one partition.
 * - Keys in several checks: two rounds.  First every check runs check-only
 *   ('?' in lua/layered.lua): nothing is consumed.  If any refuses, the
 *   statement fails and no key was charged anywhere.  Otherwise every
 *   check runs again to consume.  Another session may have consumed
 *   between the rounds, so a check can now refuse: the statement fails
 *   then, and the checks that admitted stay charged.  So a race can charge
 *   keys of a statement that was then refused, but never admits more than
 *   a limit: each check is still atomic and exact on its keys.
 *
 * A check-only check has no effect, so an unknown outcome in the first
 * round costs nothing; its checks are not run again in the second round
 * (their master just failed): the failure policy's answer stands.
 *
 * The statement counts as one call, its outcome as one allowed or denied
 * (rl_engine_settle), whatever the number of checks.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_engine_spread.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "rl_engine_int.h"
#include "rl_stats.h"

/* Checks per call of the store, as rl_allow_many's keys per round trip. */
#define RL_SPREAD_BATCH	1000

/* One check: keys first..first+n-1 of the partition-sorted order. */
typedef struct RlSpreadCheck
{
	int			first;
	int			n;
	RlAnswer	answer;
	int			tightest;		/* index into the caller's keys, or -1 */
} RlSpreadCheck;

/* Sorts by partition, then by the key's place in the statement. */
static int
rl_spread_cmp(const void *a, const void *b, void *arg)
{
	const int  *part = arg;
	int			ia = *(const int *) a;
	int			ib = *(const int *) b;

	if (part[ia] != part[ib])
		return part[ia] < part[ib] ? -1 : 1;
	return ia < ib ? -1 : (ia > ib);
}

/*
 * Runs the checks marked in run[] (all when run is NULL), RL_SPREAD_BATCH
 * per call of the store, and fills each one's answer and the key that
 * decided it (-1 for the policy's answer).
 */
static void
rl_spread_round(const RlLimiter *limiter, char **keys, const int64 *costs,
				const int *order, RlSpreadCheck *checks, int nchecks,
				const bool *run, bool check_only, RlWaitWork work)
{
	int			batch = Min(nchecks, RL_SPREAD_BATCH);
	RlCheck    *c = palloc(sizeof(RlCheck) * batch);
	bool	   *cached = palloc(sizeof(bool) * batch);
	int		   *which = palloc(sizeof(int) * batch);
	int			next = 0;

	while (next < nchecks)
	{
		int			m = 0;

		CHECK_FOR_INTERRUPTS();
		for (; next < nchecks && m < batch; next++)
		{
			RlSpreadCheck *s = &checks[next];
			char	  **skeys;
			int64	   *scosts;

			if (run != NULL && !run[next])
				continue;
			skeys = palloc(sizeof(char *) * s->n);
			scosts = palloc(sizeof(int64) * s->n);
			for (int j = 0; j < s->n; j++)
			{
				skeys[j] = keys[order[s->first + j]];
				scosts[j] = costs[order[s->first + j]];
			}
			memset(&c[m], 0, sizeof(RlCheck));
			c[m].nrules = s->n;
			c[m].keys = skeys;
			c[m].limiters = limiter;
			c[m].costs = scosts;
			c[m].uniform = true;
			c[m].rules = true;
			c[m].check_only = check_only;
			which[m++] = next;
		}
		if (m == 0)
			break;
		rl_engine_ask(c, m, work, cached);
		for (int j = 0; j < m; j++)
		{
			RlSpreadCheck *s = &checks[which[j]];

			s->answer = c[j].answer;
			s->tightest = c[j].answer.known && c[j].tightest >= 0 ?
				order[s->first + c[j].tightest] : -1;
			pfree(c[j].keys);
			pfree((void *) c[j].costs);
		}
	}
}

/*
 * The refusal that fails the statement, if any check refused: the known
 * refusal with the longest wait (after it every key admits), else the
 * first policy denial.  NULL when every check admitted.
 */
static RlSpreadCheck *
rl_spread_refusal(RlSpreadCheck *checks, int nchecks, const bool *ran)
{
	RlSpreadCheck *worst = NULL;

	for (int i = 0; i < nchecks; i++)
	{
		RlSpreadCheck *s = &checks[i];

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
 * The statement's outcome, counted and recorded once (rl_engine_settle):
 * the refusal s, or the admission when s is NULL.  Returns the refused
 * key, or -1.
 */
static int
rl_spread_settle(char **keys, const RlLimiter *limiter, const int64 *costs,
				 RlSpreadCheck *s, RlAnswer *answer)
{
	RlCheck		c = {0};
	bool		cached = false;
	int			key = s != NULL && s->tightest >= 0 ? s->tightest : 0;

	c.nrules = 1;
	c.keys = &keys[key];
	c.limiters = limiter;
	c.costs = &costs[key];
	c.rules = true;
	c.answered = true;
	if (s != NULL)
		c.answer = s->answer;
	else
	{
		c.answer.allowed = true;
		c.answer.known = true;
	}
	rl_engine_settle(&c, 1, &cached, false);
	*answer = c.answer;
	return s != NULL ? s->tightest : -1;
}

/*
 * Checks and consumes the n keys of a statement (keys[i] costs costs[i])
 * across store's partitions, as the file's banner says, chunk keys at
 * most per check.  Returns the refused key (-1 if none is known), with
 * *answer; answer->allowed when admitted.
 */
static int
rl_engine_spread(const RlStoreOps *store, char **keys,
				 const RlLimiter *limiter, const int64 *costs, int n,
				 int chunk, RlWaitWork work, RlAnswer *answer)
{
	int		   *part = palloc(sizeof(int) * n);
	int		   *order = palloc(sizeof(int) * n);
	RlSpreadCheck *checks = palloc(sizeof(RlSpreadCheck) * n);
	bool	   *consume;
	RlSpreadCheck *refusal;
	int			nchecks = 0;

	for (int i = 0; i < n; i++)
	{
		part[i] = store->partition(keys[i]);
		order[i] = i;
	}
	qsort_arg(order, n, sizeof(int), rl_spread_cmp, part);
	for (int i = 0; i < n; i++)
	{
		if (nchecks == 0 ||
			part[order[i]] != part[order[checks[nchecks - 1].first]] ||
			checks[nchecks - 1].n == chunk)
		{
			checks[nchecks].first = i;
			checks[nchecks].n = 0;
			nchecks++;
		}
		checks[nchecks - 1].n++;
	}

	rl_counters.calls++;
	consume = palloc(sizeof(bool) * nchecks);
	if (nchecks > 1)
	{
		/* Round 1: nothing is consumed; a refusal fails the statement. */
		rl_spread_round(limiter, keys, costs, order, checks, nchecks, NULL,
						true, work);
		refusal = rl_spread_refusal(checks, nchecks, NULL);
		if (refusal != NULL)
			return rl_spread_settle(keys, limiter, costs, refusal, answer);
		/* A check the policy admitted was not answered: not run again. */
		for (int i = 0; i < nchecks; i++)
			consume[i] = checks[i].answer.known;
	}
	else
		consume[0] = true;

	/* Round 2 (or the only one): consume. */
	rl_spread_round(limiter, keys, costs, order, checks, nchecks, consume,
					false, work);
	refusal = rl_spread_refusal(checks, nchecks, consume);
	if (refusal != NULL && nchecks > 1)
		elog(DEBUG1, "ratelimit: statement refused in the consume round of %d checks across partitions",
			 nchecks);
	return rl_spread_settle(keys, limiter, costs, refusal, answer);
}

/*
 * A statement's n keys against one limiter (keys[i] costs costs[i]):
 * RL_STATEMENT_CHUNK keys per check, in the order given.  When the store
 * has one partition, the checks run one round trip after the other, each
 * all or nothing, and the first refusal ends the statement: the chunks
 * before it stay consumed, as a row trigger's earlier rows do; so a
 * statement of up to RL_STATEMENT_CHUNK keys is all or nothing.  Across
 * partitions (hash slots), rl_engine_spread.  wait_work runs while the
 * store waits (the statement's WAL flush).  Returns the refused key (-1
 * if none is known) and fills *answer; answer->allowed when admitted.
 */
int
rl_engine_check_statement(char **store_keys, const RlLimiter *limiter,
						  const int64 *costs, int n, void (*wait_work) (void),
						  RlAnswer *answer)
{
	const RlStoreOps *store = rl_engine_store();

	memset(answer, 0, sizeof(RlAnswer));
	answer->allowed = true;
	answer->known = true;
	if (n == 0)
		return -1;
	if (store->partition(store_keys[0]) >= 0)
		return rl_engine_spread(store, store_keys, limiter, costs, n,
								RL_STATEMENT_CHUNK, wait_work, answer);

	for (int start = 0; start < n; start += RL_STATEMENT_CHUNK)
	{
		RlCheck		c = {0};

		CHECK_FOR_INTERRUPTS();
		c.nrules = Min(RL_STATEMENT_CHUNK, n - start);
		c.keys = store_keys + start;
		c.limiters = limiter;
		c.costs = costs + start;
		c.rules = true;
		c.uniform = c.nrules > 1;
		rl_counters.calls++;
		rl_engine_run(&c, 1, wait_work);
		if (!c.answer.allowed)
		{
			*answer = c.answer;
			return c.tightest >= 0 ? start + c.tightest : -1;
		}
	}
	return -1;
}
