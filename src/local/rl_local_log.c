/*-------------------------------------------------------------------------
 *
 * rl_local_log.c
 *	  The local engine's sliding logs: a shared pool of member blocks.
 *
 * A sliding log keeps one member (time, running sum of costs) per
 * admitted call still needed, as sliding_log.lua keeps one sorted-set
 * member per call.  Members live in blocks of RL_LOCAL_LOG_BLOCK, taken
 * from one pool of ratelimit.local_log_entries members (fixed at server
 * start) and chained per log: a log with a limit of 5 holds one block, a
 * log with a limit of 100 000 as many as it needs, and blocks go back to
 * the pool as the oldest members are dropped.  The pool's free list is
 * under a spinlock, held for the few instructions of a push or a pop;
 * everything else here runs under the partition lock of the log's entry.
 *
 * Each member keeps the sum of the costs so far (the script's "cum"), so
 * the units in the window are a subtraction and the wait of a denial a
 * walk over whole blocks, as the script's ranks make them a few sorted
 * set steps.  The sums are unsigned 64-bit and only their differences
 * are used, so they may wrap.
 *
 * When the pool has no free block, the caller has the table reclaim
 * expired entries and asks again (rl_local_run.c, through
 * rl_local_reclaim_for_log); the pool itself never reaches up into the
 * table.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/local/rl_local_log.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/shmem.h"
#include "storage/spin.h"

#include "rl_local.h"

typedef struct RlLocalLogPool
{
	slock_t		lock;
	int32		free;			/* first free block, -1 for none */
	int32		nblocks;
} RlLocalLogPool;

static RlLocalLogPool *rl_log_pool = NULL;
static RlLocalLogBlock *rl_log_blocks = NULL;

static bool rl_local_log_grow(RlLocalEntry *entry);

static int32
rl_local_log_nblocks(void)
{
	return (rl_local_log_entries + RL_LOCAL_LOG_BLOCK - 1) / RL_LOCAL_LOG_BLOCK;
}

/* Shared memory for the pool (rl_local_store.c asks for it). */
Size
rl_local_log_size(void)
{
	return add_size(MAXALIGN(sizeof(RlLocalLogPool)),
					mul_size(sizeof(RlLocalLogBlock), rl_local_log_nblocks()));
}

/*
 * Lays out the pool, every block free (rl_local_store.c's startup, which
 * holds AddinShmemInitLock).  A shared memory allocation of its own, so
 * pg_shmem_allocations shows the table and the pool apart.
 */
void
rl_local_log_startup(void)
{
	bool		found;
	char	   *mem = ShmemInitStruct("ratelimit local engine logs",
									  rl_local_log_size(), &found);

	rl_log_pool = (RlLocalLogPool *) mem;
	rl_log_blocks = (RlLocalLogBlock *) (mem + MAXALIGN(sizeof(RlLocalLogPool)));
	if (found)
		return;
	SpinLockInit(&rl_log_pool->lock);
	rl_log_pool->nblocks = rl_local_log_nblocks();
	for (int i = 0; i < rl_log_pool->nblocks; i++)
		rl_log_blocks[i].next = i + 1 < rl_log_pool->nblocks ? i + 1 : -1;
	rl_log_pool->free = rl_log_pool->nblocks > 0 ? 0 : -1;
}

/* A free block, or -1. */
static int32
rl_local_log_take(void)
{
	int32		idx;

	SpinLockAcquire(&rl_log_pool->lock);
	idx = rl_log_pool->free;
	if (idx != -1)
		rl_log_pool->free = rl_log_blocks[idx].next;
	SpinLockRelease(&rl_log_pool->lock);
	if (idx != -1)
		rl_log_blocks[idx].next = -1;
	return idx;
}

/* Gives back the chain of blocks from first to last. */
static void
rl_local_log_give(int32 first, int32 last)
{
	SpinLockAcquire(&rl_log_pool->lock);
	rl_log_blocks[last].next = rl_log_pool->free;
	rl_log_pool->free = first;
	SpinLockRelease(&rl_log_pool->lock);
}

/*
 * Makes room for need more members (before an admitted call writes),
 * taking blocks while the last one is full; false when the pool ran out
 * first (the blocks taken stay with the log, for its next call).
 */
bool
rl_local_log_room(RlLocalEntry *entry, int need)
{
	RlLocalLogHead *lg = &entry->u.lg;

	while (entry->log < 0 ||
		   lg->nblocks * RL_LOCAL_LOG_BLOCK - lg->off - lg->count < need)
	{
		if (!rl_local_log_grow(entry))
			return false;
	}
	return true;
}

/* Adds a block at the end of a log's chain; false if none is free. */
static bool
rl_local_log_grow(RlLocalEntry *entry)
{
	RlLocalLogHead *lg = &entry->u.lg;
	int32		idx;

	idx = rl_local_log_take();
	if (idx == -1)
		return false;
	if (entry->log < 0)
	{
		entry->log = idx;
		lg->tail = idx;
		lg->nblocks = 1;
		lg->off = 0;
		lg->count = 0;
		lg->base = 0;
	}
	else
	{
		rl_log_blocks[lg->tail].next = idx;
		lg->tail = idx;
		lg->nblocks++;
	}
	return true;
}

/* True when the pool has a free block (a hint: no lock taken). */
bool
rl_local_log_any_free(void)
{
	return rl_log_pool->free != -1;
}

/* Gives every block of an entry's log back to the pool. */
void
rl_local_log_free(RlLocalEntry *entry)
{
	if (entry->log < 0)
		return;
	rl_local_log_give(entry->log, entry->u.lg.tail);
	entry->log = -1;
}

/* Member i of a log (0 is the oldest), i < count. */
RlLocalMember *
rl_local_log_at(const RlLocalEntry *entry, int i)
{
	const RlLocalLogHead *lg = &entry->u.lg;
	int			pos = lg->off + i;
	int			nth = pos / RL_LOCAL_LOG_BLOCK;
	int32		idx;

	Assert(i >= 0 && i < lg->count);
	if (nth == lg->nblocks - 1)
		idx = lg->tail;
	else
	{
		idx = entry->log;
		while (nth-- > 0)
			idx = rl_log_blocks[idx].next;
	}
	return &rl_log_blocks[idx].m[pos % RL_LOCAL_LOG_BLOCK];
}

/* The cum before member i: the sum of costs up to member i - 1. */
uint64
rl_local_log_cum_before(const RlLocalEntry *entry, int i)
{
	return i == 0 ? entry->u.lg.base : rl_local_log_at(entry, i - 1)->cum;
}

/*
 * The first member stamped after floor_t (count if none).  Times never
 * decrease in call order, so whole blocks ending at or before floor_t are
 * skipped (the script's ZCOUNT).
 */
int
rl_local_log_first_after(const RlLocalEntry *entry, double floor_t)
{
	const RlLocalLogHead *lg = &entry->u.lg;
	int32		idx = entry->log;
	int			start = lg->off;	/* slot of the block's first member */
	int			i = 0;			/* index of that member */

	while (i < lg->count)
	{
		const RlLocalLogBlock *b = &rl_log_blocks[idx];
		int			n = Min(RL_LOCAL_LOG_BLOCK - start, lg->count - i);

		if (b->m[start + n - 1].t > floor_t)
		{
			for (int s = start;; s++, i++)
			{
				if (b->m[s].t > floor_t)
					return i;
			}
		}
		i += n;
		start = 0;
		idx = b->next;
	}
	return lg->count;
}

/*
 * The first member from first on whose cost, with those between, makes
 * at least k units: the one whose leaving lets k units in (the script's
 * search by rank).  The newest when none does (not reached: k is at most
 * the units in the window).
 */
int
rl_local_log_reach(const RlLocalEntry *entry, int first, uint64 k)
{
	const RlLocalLogHead *lg = &entry->u.lg;
	uint64		before = rl_local_log_cum_before(entry, first);
	int			pos = lg->off + first;
	int32		idx = entry->log;
	int			i = first;

	for (int nth = pos / RL_LOCAL_LOG_BLOCK; nth > 0; nth--)
		idx = rl_log_blocks[idx].next;
	pos %= RL_LOCAL_LOG_BLOCK;
	while (i < lg->count)
	{
		const RlLocalLogBlock *b = &rl_log_blocks[idx];
		int			n = Min(RL_LOCAL_LOG_BLOCK - pos, lg->count - i);

		if (b->m[pos + n - 1].cum - before >= k)
		{
			for (int s = pos;; s++, i++)
			{
				if (b->m[s].cum - before >= k)
					return i;
			}
		}
		i += n;
		pos = 0;
		idx = b->next;
	}
	return lg->count - 1;
}

/*
 * Drops every member (the script's UNLINK), keeping the first block for
 * the member about to be written.
 */
void
rl_local_log_clear(RlLocalEntry *entry)
{
	RlLocalLogHead *lg = &entry->u.lg;

	Assert(entry->log >= 0);
	if (lg->nblocks > 1)
		rl_local_log_give(rl_log_blocks[entry->log].next, lg->tail);
	rl_log_blocks[entry->log].next = -1;
	lg->tail = entry->log;
	lg->nblocks = 1;
	lg->off = 0;
	lg->count = 0;
	lg->base = 0;
}

/* Drops the n oldest members (ZREMRANGEBYRANK), emptied blocks freed. */
void
rl_local_log_prune(RlLocalEntry *entry, int n)
{
	RlLocalLogHead *lg = &entry->u.lg;

	Assert(n <= lg->count);
	while (n > 0)
	{
		int			k = Min(n, RL_LOCAL_LOG_BLOCK - lg->off);

		lg->base = rl_log_blocks[entry->log].m[lg->off + k - 1].cum;
		lg->off += k;
		lg->count -= k;
		n -= k;
		if (lg->off == RL_LOCAL_LOG_BLOCK)
		{
			int32		head = entry->log;

			if (head == lg->tail)
			{
				/* Empty (not reached: room was made for a member). */
				lg->off = 0;
				break;
			}
			entry->log = rl_log_blocks[head].next;
			rl_local_log_give(head, head);
			lg->nblocks--;
			lg->off = 0;
		}
	}
}

/* Appends a member (rl_local_log_room made room for it). */
void
rl_local_log_push(RlLocalEntry *entry, double t, uint64 cost)
{
	RlLocalLogHead *lg = &entry->u.lg;
	int			slot = lg->off + lg->count -
		(lg->nblocks - 1) * RL_LOCAL_LOG_BLOCK;
	uint64		cum = lg->count == 0 ? lg->base :
		rl_local_log_at(entry, lg->count - 1)->cum;
	RlLocalMember *m;

	Assert(entry->log >= 0 && slot >= 0 && slot < RL_LOCAL_LOG_BLOCK);
	m = &rl_log_blocks[lg->tail].m[slot];
	m->t = t;
	m->cum = cum + cost;
	lg->count++;
}

/* The block and slot of member i of a log. */
static void
rl_local_log_seek(const RlLocalEntry *entry, int i, int32 *idx, int *pos)
{
	int			p = entry->u.lg.off + i;

	*idx = entry->log;
	for (int nth = p / RL_LOCAL_LOG_BLOCK; nth > 0; nth--)
		*idx = rl_log_blocks[*idx].next;
	*pos = p % RL_LOCAL_LOG_BLOCK;
}

/* The slot after (idx, pos), in call order. */
static inline void
rl_local_log_step(int32 *idx, int *pos)
{
	if (++*pos == RL_LOCAL_LOG_BLOCK)
	{
		*idx = rl_log_blocks[*idx].next;
		*pos = 0;
	}
}

/*
 * A refund (lua/sliding_log.lua's sliding_log_refund_many, one call): the
 * member of time t and cost cost whose cum, as the script keeps it (modulo
 * RL_LOCAL_LOG_WRAP), is cum, or else the first of that time and cost,
 * is removed, and each member after it moves up one slot with its cum
 * less cost, so that every window that held it counts that much less and
 * the others are unchanged; base stays.  False, and nothing changed, when
 * there is no such member, or a member after it has a cum (as the script
 * keeps it) below cost: the script's cum wrapped since.  The work is the
 * members from time t on.  Last blocks left empty go back to the pool
 * (only the last block has free slots); a log left empty keeps its first
 * block, as a cleared one does: the caller frees it with the entry.
 */
bool
rl_local_log_refund(RlLocalEntry *entry, double t, uint64 cost, uint64 cum)
{
	RlLocalLogHead *lg = &entry->u.lg;
	int			first = rl_local_log_first_after(entry, t - 1);
	uint64		before;
	int			gone = -1;
	int32		idx;
	int			pos;

	if (first >= lg->count)
		return false;
	/* Times are whole microseconds: the members of time t come first. */
	before = rl_local_log_cum_before(entry, first);
	rl_local_log_seek(entry, first, &idx, &pos);
	for (int i = first; i < lg->count; i++, rl_local_log_step(&idx, &pos))
	{
		const RlLocalMember *m = &rl_log_blocks[idx].m[pos];

		if (m->t != t)
			break;
		if (m->cum - before == cost)
		{
			if (gone < 0)
				gone = i;
			if (m->cum % RL_LOCAL_LOG_WRAP == cum)
			{
				gone = i;
				break;
			}
		}
		before = m->cum;
	}
	if (gone < 0 || lg->count - gone - 1 > RL_LOG_REWRITE_MAX)
		return false;
	rl_local_log_seek(entry, gone, &idx, &pos);
	for (int i = gone + 1; i < lg->count; i++)
	{
		rl_local_log_step(&idx, &pos);
		if (rl_log_blocks[idx].m[pos].cum % RL_LOCAL_LOG_WRAP < cost)
			return false;
	}

	rl_local_log_seek(entry, gone, &idx, &pos);
	for (int i = gone + 1; i < lg->count; i++)
	{
		int32		from = idx;
		int			at = pos;

		rl_local_log_step(&from, &at);
		rl_log_blocks[idx].m[pos].t = rl_log_blocks[from].m[at].t;
		rl_log_blocks[idx].m[pos].cum = rl_log_blocks[from].m[at].cum - cost;
		idx = from;
		pos = at;
	}
	lg->count--;
	while (lg->nblocks > 1 &&
		   lg->off + lg->count <= (lg->nblocks - 1) * RL_LOCAL_LOG_BLOCK)
	{
		int32		prev = entry->log;

		while (rl_log_blocks[prev].next != lg->tail)
			prev = rl_log_blocks[prev].next;
		rl_local_log_give(lg->tail, lg->tail);
		rl_log_blocks[prev].next = -1;
		lg->tail = prev;
		lg->nblocks--;
	}
	return true;
}
