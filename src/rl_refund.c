/*-------------------------------------------------------------------------
 *
 * rl_refund.c
 *	  Counts that follow the transaction: what admitted checks took is
 *	  given back when the work they admitted is rolled back.
 *
 * A check whose limiter asks for it (RlLimiter.refund: a trigger's
 * option, a policy's refund_on_abort, ratelimit.refund_on_abort for the
 * parameter forms) leaves, when its store admits it, one pending refund
 * per rule that took something: the store key, the limiter, the cost and
 * the store's receipt (what exactly was taken), under the subtransaction
 * that made the check.
 *
 * A subtransaction that aborts (ROLLBACK TO SAVEPOINT, a PL/pgSQL block
 * that caught an error) gives back its refunds and those its committed
 * children passed to it; one that commits passes its refunds to its
 * parent.  A top transaction that aborts gives back every refund left;
 * one that commits or is prepared forgets them: committed work is never
 * refunded, and a prepared transaction is final at PREPARE (ROLLBACK
 * PREPARED gives nothing back; the session that checked may be gone).
 *
 * A concurrency check (lua/concurrency.lua) is kept the same way whatever
 * the refund settings: its slot is released when its work ends, by the
 * same path, at an abort as a refund and at a commit or PREPARE too.
 *
 * Giving back runs inside the abort, where an ERROR must not escape:
 * each store gets the refunds in one call (its operation sends one round
 * trip per node, with the command timeout; the abort holds interrupts
 * off, so the timeout bounds it), and whatever the store did not
 * deliver, or an ERROR it raised, is dropped and counted as lost
 * (rl_stats.refunds_lost), never sent again: a refund whose outcome is
 * unknown may have been applied, and one applied twice would give room
 * nobody paid for.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_refund.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "utils/memutils.h"

#include "rl_engine_int.h"
#include "rl_guc.h"
#include "rl_policy.h"
#include "rl_stats.h"

/* One refund waiting for its transaction's outcome. */
typedef struct RlPending
{
	RlRefund	refund;
	const RlStoreOps *store;
	SubTransactionId subid;
} RlPending;

/*
 * Most refunds one transaction keeps: about 150 MB with their keys.  A
 * bulk load under a row trigger keeps one per row (one per key and window
 * for the window algorithms); past this, further checks are not kept, and
 * count as lost if the transaction aborts.
 */
#define RL_REFUND_MAX_PENDING	(1 << 20)

/* The pending refunds, oldest first, in rl_refund_cxt. */
static MemoryContext rl_refund_cxt = NULL;
static RlPending *rl_pending = NULL;
static int	rl_npending = 0;
static int	rl_maxpending = 0;
static int64 rl_unkept = 0;		/* past RL_REFUND_MAX_PENDING */

static void rl_refund_xact(XactEvent event, void *arg);
static void rl_refund_subxact(SubXactEvent event, SubTransactionId mySubid,
							  SubTransactionId parentSubid, void *arg);

/* The context and the callbacks, at a backend's first refund. */
static void
rl_refund_start(void)
{
	if (rl_refund_cxt != NULL)
		return;
	rl_refund_cxt = AllocSetContextCreate(TopMemoryContext,
										  "ratelimit refunds",
										  ALLOCSET_SMALL_SIZES);
	RegisterXactCallback(rl_refund_xact, NULL);
	RegisterSubXactCallback(rl_refund_subxact, NULL);
}

/*
 * Forgets every pending refund (the transaction ended).  The context is
 * emptied only once it holds more than a small transaction's worth, so a
 * busy session's commits free nothing but the count.
 */
static void
rl_refund_forget(void)
{
	rl_unkept = 0;
	rl_npending = 0;
	if (rl_refund_cxt == NULL ||
		MemoryContextMemAllocated(rl_refund_cxt, true) <= 64 * 1024)
		return;
	MemoryContextReset(rl_refund_cxt);
	rl_pending = NULL;
	rl_maxpending = 0;
}

/*
 * Whether a refund can join the one before it: the same store, key,
 * limiter and receipt under the same subtransaction (a row trigger's
 * rows of one key in one fixed or sliding-counter window).  A bucket's
 * receipt and a log's member differ from call to call, so each of those
 * stays its own.
 */
static bool
rl_refund_joins(const RlPending *last, const RlStoreOps *store,
				const char *key, const RlLimiter *l, const RlReceipt *r,
				SubTransactionId subid)
{
	const RlLimiter *m = &last->refund.limiter;

	return last->store == store && last->subid == subid &&
		last->refund.receipt.r1 == r->r1 && last->refund.receipt.r2 == r->r2 &&
		m->algorithm == l->algorithm && m->limit == l->limit &&
		m->window_us == l->window_us && m->burst == l->burst &&
		m->carry == l->carry && strcmp(last->refund.key, key) == 0;
}

/*
 * Keeps the refunds of an admitted check: each rule that asks for one
 * (its limiter's refund) and took something.  store is the store that
 * admitted it (the local one when it answered for Redis).
 */
void
rl_refund_keep(const RlCheck *check, const RlStoreOps *store)
{
	SubTransactionId subid;
	MemoryContext old;

	if (check->receipts == NULL || !IsTransactionState())
		return;
	rl_refund_start();
	subid = GetCurrentSubTransactionId();
	old = MemoryContextSwitchTo(rl_refund_cxt);
	for (int i = 0; i < check->nrules; i++)
	{
		const RlLimiter *l = rl_check_limiter_of(check, i);
		RlPending	p;

		if ((!rl_refunds(l) && l->algorithm != RL_CONCURRENCY) ||
			check->costs[i] <= 0)
			continue;
		if (rl_npending > 0 &&
			rl_refund_joins(&rl_pending[rl_npending - 1], store,
							check->keys[i], l, &check->receipts[i], subid) &&
			!rl_algorithm_logs(l->algorithm))
		{
			rl_pending[rl_npending - 1].refund.cost += check->costs[i];
			continue;
		}
		if (rl_npending == RL_REFUND_MAX_PENDING)
		{
			rl_unkept++;
			continue;
		}
		/*
		 * Made whole before it joins the list: an allocation that fails
		 * leaves no half-made entry for the abort to send.
		 */
		p.store = store;
		p.subid = subid;
		p.refund.key = pstrdup(check->keys[i]);
		p.refund.limiter = *l;
		p.refund.limiter.name = l->name != NULL ? pstrdup(l->name) : NULL;
		p.refund.cost = check->costs[i];
		p.refund.receipt = check->receipts[i];
		p.refund.done = false;
		if (rl_npending == rl_maxpending)
		{
			int			grown = Max(16, 2 * rl_maxpending);

			rl_pending = rl_pending == NULL ?
				palloc(sizeof(RlPending) * grown) :
				repalloc_huge(rl_pending, sizeof(RlPending) * grown);
			rl_maxpending = grown;
		}
		rl_pending[rl_npending++] = p;
	}
	MemoryContextSwitchTo(old);
}

/*
 * Hands n refunds to their store and counts them: delivered in
 * rl_stats.refunds, the others in refunds_lost (returned, with *cause and
 * *why for the WARNING).  An ERROR raised while a transaction aborts (or
 * after its commit, or at the backend's exit) must not leave here: it is
 * caught, the locks the store may have held are released (an abort
 * released every other one before its callbacks), and the refunds it
 * left count as lost.  Its message is not repeated: it may name a key.
 */
static int64
rl_refund_deliver(const RlStoreOps *store, RlRefund *refunds, int n,
				  RlLostCause *cause, const char **why)
{
	MemoryContext cxt = CurrentMemoryContext;
	int64		lost = 0;

	PG_TRY();
	{
		RlFailure  *failure = store->refund(refunds, n);

		if (failure != NULL)
			*why = pstrdup(failure->what);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		LWLockReleaseAll();
		FlushErrorState();
		*cause = RL_LOST_ERROR;
	}
	PG_END_TRY();
	for (int k = 0; k < n; k++)
		lost += !refunds[k].done;
	rl_counters.refunds += n - lost;
	rl_counters.refunds_lost += lost;
	return lost;
}

/*
 * Gives back the pending refunds from first on (those of the aborted
 * work; with releases, only the concurrency slots, at a commit), each
 * store's in one call, newest first, and drops them.  The list is cut
 * before any store is called, and a call made while one is under way
 * (proc_exit's abort after a FATAL raised in the middle of one) sends
 * nothing: a refund is never sent twice.  No ERROR leaves here: a
 * store's is caught, and its refunds count as lost.
 */
static void
rl_refund_give(int first, bool releases)
{
	static const RlStoreOps *const stores[] = {&rl_redis_store, &rl_local_store};
	static bool giving = false;
	int			count[lengthof(stores)] = {0};
	int			at[lengthof(stores)];
	int			n = 0;
	RlRefund   *batch;
	int64		lost = 0;
	RlLostCause cause = RL_LOST_STORE;
	const char *why = NULL;

	if (giving)
		return;
	for (int i = first; i < rl_npending; i++)
	{
		if (!releases ||
			rl_pending[i].refund.limiter.algorithm == RL_CONCURRENCY)
		{
			count[rl_pending[i].store == stores[0] ? 0 : 1]++;
			n++;
		}
	}
	if (n == 0)
	{
		rl_npending = releases ? 0 : first;
		return;
	}

	/* Each store's refunds, newest first; the list no longer holds them. */
	batch = MemoryContextAllocExtended(rl_refund_cxt, sizeof(RlRefund) * n,
									   MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
	at[0] = 0;
	at[1] = count[0];
	for (int i = rl_npending - 1; i >= first && batch != NULL; i--)
	{
		if (!releases ||
			rl_pending[i].refund.limiter.algorithm == RL_CONCURRENCY)
			batch[at[rl_pending[i].store == stores[0] ? 0 : 1]++] =
				rl_pending[i].refund;
	}
	rl_npending = releases ? 0 : first;
	if (batch == NULL)
	{
		rl_counters.refunds_lost += n;
		rl_policy_refunds_lost(n, RL_LOST_MEMORY, NULL);
		return;
	}

	giving = true;
	for (int s = 0, from = 0; s < lengthof(stores); from += count[s], s++)
	{
		if (count[s] > 0)
			lost += rl_refund_deliver(stores[s], batch + from, count[s],
									  &cause, &why);
	}
	giving = false;
	if (lost > 0)
		rl_policy_refunds_lost(lost, cause, why);
}

/* The end of a transaction: an abort gives back, the rest forget. */
static void
rl_refund_xact(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			rl_refund_give(0, false);
			if (rl_unkept > 0)
			{
				rl_counters.refunds_lost += rl_unkept;
				rl_policy_refunds_lost(rl_unkept, RL_LOST_TOO_MANY, NULL);
			}
			rl_refund_forget();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			rl_refund_give(0, true);
			rl_refund_forget();
			break;
		default:
			break;
	}
}

/*
 * The end of a subtransaction: an abort gives back its refunds (its
 * committed children's are its own by then), a commit passes them up.
 * A subtransaction's refunds are the newest, so they end the list.
 */
static void
rl_refund_subxact(SubXactEvent event, SubTransactionId mySubid,
				  SubTransactionId parentSubid, void *arg)
{
	int			first = rl_npending;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	while (first > 0 && rl_pending[first - 1].subid == mySubid)
		first--;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = first; i < rl_npending; i++)
			rl_pending[i].subid = parentSubid;
		return;
	}
	rl_refund_give(first, false);
}

/*
 * Holds of the session (rl_hold): concurrency slots kept beyond their
 * transaction, for work that spans several, in rl_hold_cxt under TopMemory
 * until rl_release or the backend's exit (before_shmem_exit), which give
 * them back as a transaction's end gives its slots.  A hold whose release
 * never comes keeps its slot until its lease (the window) ends.
 */
typedef struct RlHold
{
	int64		holder;
	RlPending	pending;
} RlHold;

static MemoryContext rl_hold_cxt = NULL;
static RlHold *rl_holds = NULL;
static int	rl_nholds = 0;
static int	rl_maxholds = 0;
static int64 rl_last_holder = 0;

/* Gives one refund (a hold's release) back outside a transaction's end. */
static void
rl_refund_send_one(const RlStoreOps *store, RlRefund *refund)
{
	RlLostCause cause = RL_LOST_STORE;
	const char *why = NULL;

	if (rl_refund_deliver(store, refund, 1, &cause, &why) > 0)
		rl_policy_refunds_lost(1, cause, why);
}

/* At the backend's exit: every hold of the session released. */
static void
rl_refund_exit(int code, Datum arg)
{
	while (rl_nholds > 0)
	{
		RlHold		h = rl_holds[--rl_nholds];

		rl_refund_send_one(h.pending.store, &h.pending.refund);
	}
}

/*
 * Keeps an admitted check's slot as a hold of the session; returns its
 * holder (a number of this session's, from 1).
 */
int64
rl_refund_hold(const RlCheck *check, const RlStoreOps *store)
{
	MemoryContext old;
	RlHold		h;

	if (rl_hold_cxt == NULL)
	{
		rl_hold_cxt = AllocSetContextCreate(TopMemoryContext,
											"ratelimit holds",
											ALLOCSET_SMALL_SIZES);
		before_shmem_exit(rl_refund_exit, (Datum) 0);
	}
	old = MemoryContextSwitchTo(rl_hold_cxt);
	h.holder = ++rl_last_holder;
	h.pending.store = store;
	h.pending.subid = InvalidSubTransactionId;
	h.pending.refund.key = pstrdup(check->keys[0]);
	h.pending.refund.limiter = check->limiters[0];
	h.pending.refund.limiter.name = check->limiters[0].name != NULL ?
		pstrdup(check->limiters[0].name) : NULL;
	h.pending.refund.cost = check->costs[0];
	h.pending.refund.receipt = check->receipts[0];
	h.pending.refund.done = false;
	if (rl_nholds == rl_maxholds)
	{
		int			grown = Max(8, 2 * rl_maxholds);

		rl_holds = rl_holds == NULL ? palloc(sizeof(RlHold) * grown) :
			repalloc(rl_holds, sizeof(RlHold) * grown);
		rl_maxholds = grown;
	}
	rl_holds[rl_nholds++] = h;
	MemoryContextSwitchTo(old);
	return h.holder;
}

/* Releases the session's hold holder; false when it holds no such hold. */
bool
rl_refund_release(int64 holder)
{
	for (int i = 0; i < rl_nholds; i++)
	{
		RlHold		h;

		if (rl_holds[i].holder != holder)
			continue;
		h = rl_holds[i];
		rl_holds[i] = rl_holds[--rl_nholds];
		rl_refund_send_one(h.pending.store, &h.pending.refund);
		pfree((void *) h.pending.refund.key);
		if (h.pending.refund.limiter.name != NULL)
			pfree((void *) h.pending.refund.limiter.name);
		return true;
	}
	return false;
}
