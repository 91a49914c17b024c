/*-------------------------------------------------------------------------
 *
 * rl_roundtrip.c
 *	  Round trips to Redis nodes, every wait on the latch.
 *
 * A round trip writes a pipeline of commands and reads one reply per
 * command.  hiredis builds the commands and parses the replies; the bytes
 * go over rl_link.c (plain TCP or TLS), and every wait for a socket
 * happens here, in a WaitEventSet that also watches the process latch and
 * the postmaster, so query cancel, statement_timeout and
 * pg_terminate_backend interrupt a stalled Redis at once.  A call on
 * several cluster nodes sends every pipeline first, then waits on all of
 * their sockets at once (rl_nodes_receive), so a stalled node costs only
 * its own keys.
 *
 * A wait cut short (the deadline, an interrupt, a broken link) drops the
 * connection: its reply is never read, and the command is never sent
 * again (rl_node.c's banner).
 *
 * In redis/'s order (test/layers.sh's ORDER; rl_conn.c's banner) this
 * file calls only rl_node.c (the failure record) and rl_link.c below it.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_roundtrip.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/sds.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "rl_node.h"
#include "rl_compat.h"
#include "rl_stats.h"

/* Replies larger than RL_MAX_REPLY_* are accepted (CLUSTER SLOTS). */
bool		rl_large_replies = false;

/* The element count of an array reply refused by rl_connect.c's bound. */
int			rl_refused_elements = 0;

/* Lets the next round trips accept replies up to RL_MAX_LARGE_*. */
void
rl_conn_large_replies(bool on)
{
	rl_large_replies = on;
}

/*
 * Waits until the socket is ready for "events" or the deadline passes;
 * false on timeout.  Interrupts are served here: a cancel or terminate
 * throws out of this loop, and the caller's PG_CATCH drops the connection.
 * A deadline that has passed still gets one look at the socket, so that a
 * reply which arrived meanwhile (while the WAL was flushed, say) is read
 * rather than thrown away with the link.
 */
bool
rl_node_wait(RlNode *node, uint32 events, TimestampTz deadline)
{
	if (events != node->sock_events)
	{
		ModifyWaitEvent(node->waitset, node->sock_pos, events, NULL);
		node->sock_events = events;
	}

	for (;;)
	{
		WaitEvent	event;
		long		timeout;

		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (WaitEventSetWait(node->waitset, Max(timeout, 0), &event, 1,
							 PG_WAIT_EXTENSION) == 0)
		{
			if (timeout <= 0)
				return false;
			continue;			/* timed out: the next pass sees it */
		}
		if (event.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (event.events & events)
			return true;
	}
}

/* The socket event a link step asked for (rl_link.h). */
uint32
rl_node_io_events(RlIo io)
{
	return io == RL_IO_WANT_WRITE ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;
}

/*
 * Records a broken link whose reason may be a TLS setting of ours (a
 * client certificate the server refused, a server not speaking TLS).
 */
static void
rl_link_failed(RlNode *node, const char *what)
{
	const char *setting = node->ssl != NULL ? rl_tls_error_setting() : NULL;

	if (setting != NULL)
		rl_conn_misconfigured(setting, "%s: %s", what, node->ctx->errstr);
	else
		rl_conn_failure(strncmp(what, "could not parse", 15) == 0 ?
						RL_FAILED_PROTOCOL : RL_FAILED_LOST,
						false, "%s: %s", what, node->ctx->errstr);
}

/* Writes everything hiredis has buffered. */
static bool
rl_flush(RlNode *node, TimestampTz deadline)
{
	for (;;)
	{
		RlIo		io = rl_link_write(node->ctx, node->ssl);

		if (io == RL_IO_ERROR)
		{
			rl_link_failed(node, "could not send to Redis");
			return false;
		}
		if (io == RL_IO_DONE)
			return true;
		if (!rl_node_wait(node, rl_node_io_events(io), deadline))
		{
			rl_conn_failure(RL_FAILED_TIMEOUT, false, "timed out sending to Redis");
			return false;
		}
	}
}

/*
 * Work a caller wants done while Redis runs its commands (the statement
 * trigger's WAL flush, rl_trigger_statement.c): run once the commands are
 * written, before the wait for their replies, so that the two overlap.
 * The I/O layer does not know what it is; NULL is nothing.
 */
static void (*rl_wait_work) (void) = NULL;

/* Sets the work to overlap with the waits for Redis; NULL clears it. */
void
rl_conn_set_wait_work(void (*work) (void))
{
	rl_wait_work = work;
}

/* The text of the first error reply among replies[0..n), or NULL. */
static const char *
rl_first_error(redisReply **replies, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (replies[i] != NULL && replies[i]->type == REDIS_REPLY_ERROR)
			return replies[i]->str;
	}
	return NULL;
}

/*
 * Records a broken link.  A server that refuses a client (max clients,
 * for one) replies with an error and closes at once, so the rest of a
 * pipelined batch fails with a reset: the error it did send says far
 * more than the reset does.
 */
static void
rl_link_broken(RlNode *node, redisReply **replies, int got, const char *what)
{
	const char *said = rl_first_error(replies, got);
	char		text[200];

	if (rl_refused_elements > 0)
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "Redis sent an array of %d elements, more than any reply to the extension's commands has",
						rl_refused_elements);
	else if (said != NULL)
	{
		rl_reply_text(said, text, sizeof(text));
		rl_conn_failure(RL_FAILED_LOST, false, "Redis closed the connection after replying: %s",
						text);
	}
	else
		rl_link_failed(node, what);
}

/* Reads n replies, in order. */
static bool
rl_read(RlNode *node, redisReply **replies, int n, TimestampTz deadline)
{
	redisContext *ctx = node->ctx;
	size_t		limit = rl_large_replies ? RL_MAX_LARGE_BYTES : RL_MAX_REPLY_BYTES;
	uint32		want = WL_SOCKET_READABLE;

	for (int i = 0; i < n; i++)
	{
		void	   *reply = NULL;
		RlIo		io;

		for (;;)
		{
			if (redisGetReplyFromReader(ctx, &reply) == REDIS_ERR)
			{
				rl_link_broken(node, replies, i, "could not parse Redis reply");
				return false;
			}
			if (reply != NULL)
				break;
			if (!rl_node_wait(node, want, deadline))
			{
				rl_conn_failure(RL_FAILED_TIMEOUT, false, "timed out waiting for Redis reply");
				return false;
			}
			io = rl_link_read(ctx, node->ssl, limit);
			if (io == RL_IO_ERROR)
			{
				rl_link_broken(node, replies, i, "could not receive from Redis");
				return false;
			}
			want = rl_node_io_events(io);
			if (ctx->reader->len - ctx->reader->pos > limit)
			{
				rl_conn_failure(RL_FAILED_PROTOCOL, false, "Redis sent a reply of more than %d bytes, more than any reply to the extension's commands has",
								(int) limit);
				return false;
			}
		}
		replies[i] = (redisReply *) reply;
	}

	/*
	 * Bytes after the last reply answer no command of ours: the peer is out
	 * of step (or not Redis), so none of these replies can be trusted to be
	 * the answer to its command.
	 */
	if (ctx->reader->pos < ctx->reader->len)
	{
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "Redis sent more replies than commands");
		return false;
	}
	return true;
}

void
rl_free_replies(redisReply **replies, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (replies[i] != NULL)
			freeReplyObject(replies[i]);
		replies[i] = NULL;
	}
}

/*
 * Sends n commands in one write and reads their n replies: one network
 * round trip however many commands.  False when Redis could not be
 * reached in time; the connection is then gone and the failure recorded.
 * Replies are hiredis objects; the caller frees them.  With overlap the
 * caller's wait work (rl_conn_set_wait_work) runs while the reply is on
 * its way.
 */
bool
rl_node_roundtrip(RlNode *node, RlCommand *cmds, int n, redisReply **replies,
				  TimestampTz deadline, bool overlap)
{
	for (int i = 0; i < n; i++)
		replies[i] = NULL;
	if (!rl_node_send(node, cmds, n))
		return false;

	/*
	 * An ERROR here leaves the link busy: the next call drops it
	 * (rl_conn_begin), since its replies were never read.
	 */
	if (overlap)
		rl_conn_wait_work();
	return rl_node_receive(node, replies, n, deadline);
}

/*
 * The first half of a round trip on several nodes: queues n commands on
 * the node and writes what its socket takes now, without waiting, so that
 * every node gets its pipeline before any reply is waited for.  False
 * (recorded, link dropped) when the commands could not be queued or the
 * link broke.  rl_node_receive completes it.
 */
bool
rl_node_send(RlNode *node, RlCommand *cmds, int n)
{
	rl_conn_cur = node;
	Assert(node->ctx != NULL && !node->busy);
	rl_stats_rtt_start(&node->sent_at);
	for (int i = 0; i < n; i++)
	{
		if (redisAppendCommandArgv(node->ctx, cmds[i].argc, cmds[i].argv,
								   cmds[i].argvlen) != REDIS_OK)
		{
			rl_conn_failure(RL_FAILED_LOST, false, "could not queue Redis command: %s",
							node->ctx->errstr);
			return false;
		}
	}
	node->busy = true;
	if (rl_link_write(node->ctx, node->ssl) == RL_IO_ERROR)
	{
		rl_link_failed(node, "could not send to Redis");
		return false;
	}
	return true;
}

/*
 * The second half: writes what is left and reads the n replies, by the
 * deadline shared by every node of the call.  A deadline that passed
 * while other nodes were waited for still gives each socket one look, so
 * replies that are there are taken.  False as rl_node_roundtrip.
 */
bool
rl_node_receive(RlNode *node, redisReply **replies, int n,
				TimestampTz deadline)
{
	bool		ok = false;

	rl_conn_cur = node;
	for (int i = 0; i < n; i++)
		replies[i] = NULL;
	PG_TRY();
	{
		ok = rl_flush(node, deadline) && rl_read(node, replies, n, deadline);
	}
	PG_CATCH();
	{
		rl_free_replies(replies, n);
		rl_node_discard(node);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ok)
	{
		rl_free_replies(replies, n);
		return false;
	}
	node->busy = false;
	rl_stats_rtt_end(&node->sent_at);
	return true;
}

/*
 * One step of a node in rl_nodes_receive: writes what is left of its
 * pipeline, or reads what has arrived and takes the replies that are
 * complete.  Returns the socket event to wait for next, 0 once all n
 * replies are in, or -1 when the link failed (recorded, dropped).
 */
static int
rl_node_step(RlNode *node, redisReply **replies, int n, int *have)
{
	redisContext *ctx = node->ctx;
	size_t		limit = rl_large_replies ? RL_MAX_LARGE_BYTES : RL_MAX_REPLY_BYTES;
	RlIo		io;

	rl_conn_cur = node;
	if (sdslen(ctx->obuf) > 0)
	{
		io = rl_link_write(ctx, node->ssl);
		if (io == RL_IO_ERROR)
		{
			rl_link_failed(node, "could not send to Redis");
			return -1;
		}
		return io == RL_IO_DONE ? WL_SOCKET_READABLE : rl_node_io_events(io);
	}
	io = rl_link_read(ctx, node->ssl, limit);
	if (io == RL_IO_ERROR)
	{
		rl_link_broken(node, replies, *have, "could not receive from Redis");
		return -1;
	}
	if (ctx->reader->len - ctx->reader->pos > limit)
	{
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "Redis sent a reply of more than %d bytes, more than any reply to the extension's commands has",
						(int) limit);
		return -1;
	}
	while (*have < n)
	{
		void	   *reply = NULL;

		if (redisGetReplyFromReader(ctx, &reply) == REDIS_ERR)
		{
			rl_link_broken(node, replies, *have, "could not parse Redis reply");
			return -1;
		}
		if (reply == NULL)
			return rl_node_io_events(io);
		replies[(*have)++] = (redisReply *) reply;
	}
	/* Bytes after the last reply: see rl_read. */
	if (ctx->reader->pos < ctx->reader->len)
	{
		rl_conn_failure(RL_FAILED_PROTOCOL, false, "Redis sent more replies than commands");
		return -1;
	}
	node->busy = false;
	rl_stats_rtt_end(&node->sent_at);
	return 0;
}

/*
 * A wait set of the latch, the postmaster and the socket of every node
 * still in "events" (0: done), in CurrentMemoryContext; NULL when the
 * backend has no descriptor left for its epoll instance.  The set takes
 * that descriptor from the backend's budget itself (CreateWaitEventSet,
 * with an ERROR when there is none): it is reserved here first, so a
 * backend out of descriptors gets NULL, and handed back just before the
 * set takes it (FreeWaitEventSet returns it).
 */
static WaitEventSet *
rl_nodes_waitset(RlNode **nodes, int nn, const uint32 *events)
{
	WaitEventSet *set;

	if (!AcquireExternalFD())
		return NULL;
	ReleaseExternalFD();
	set = rl_create_wait_event_set(CurrentMemoryContext, nn + 2);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int k = 0; k < nn; k++)
	{
		if (events[k] != 0)
			AddWaitEventToSet(set, events[k], nodes[k]->ctx->fd, NULL,
							  (void *) (intptr_t) k);
	}
	return set;
}

/*
 * The second half of a round trip on several nodes at once: one wait on
 * every node's socket (rl_node_send wrote what each took then), writing
 * the rest of a pipeline where a socket takes more and reading whatever
 * node has replies, so that a slow or stalled node costs only its own
 * keys, and a pipeline larger than a socket's buffer does not wait for
 * the nodes before it.  ok[k] says on entry that node k's pipeline went
 * out and on return that its nb[k] replies are in replies[start[k]...];
 * a node that broke or missed the one deadline is recorded and dropped
 * (its keys get the policy's answer; nothing is sent again).  The wait
 * set is made again when a node leaves it, and freed on every path: a
 * cancel or statement_timeout throws out of here, and the caller drops
 * every link left busy.
 */
void
rl_nodes_receive(RlNode **nodes, int nn, bool *ok, redisReply **replies,
				 const int *start, const int *nb, TimestampTz deadline)
{
	uint32	   *events = palloc0(sizeof(uint32) * nn);
	int		   *have = palloc0(sizeof(int) * nn);
	WaitEvent  *occurred = palloc(sizeof(WaitEvent) * (nn + 2));
	WaitEventSet *volatile set = NULL;
	int			active = 0;

	for (int k = 0; k < nn; k++)
	{
		for (int i = 0; i < nb[k]; i++)
			replies[start[k] + i] = NULL;
		if (!ok[k])
			continue;
		events[k] = sdslen(nodes[k]->ctx->obuf) > 0 ?
			WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;
		active++;
	}

	PG_TRY();
	{
		while (active > 0)
		{
			long		timeout;
			int			got;
			bool		changed = false;

			if (set == NULL)
			{
				set = rl_nodes_waitset(nodes, nn, events);
				if (set == NULL)
				{
					/* No descriptor for the set: one node at a time. */
					for (int k = 0; k < nn; k++)
					{
						if (events[k] == 0)
							continue;
						ok[k] = rl_node_receive(nodes[k],
												replies + start[k] + have[k],
												nb[k] - have[k], deadline);
						if (!ok[k])
							rl_free_replies(replies + start[k], nb[k]);
					}
					break;
				}
			}
			timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
			got = WaitEventSetWait(set, Max(timeout, 0), occurred, nn + 2,
								   PG_WAIT_EXTENSION);
			if (got == 0 && timeout <= 0)
			{
				for (int k = 0; k < nn; k++)
				{
					if (events[k] == 0)
						continue;
					rl_conn_cur = nodes[k];
					rl_free_replies(replies + start[k], nb[k]);
					rl_conn_failure(RL_FAILED_TIMEOUT, false,
									sdslen(nodes[k]->ctx->obuf) > 0 ?
									"timed out sending to Redis" :
									"timed out waiting for Redis reply");
					ok[k] = false;
					events[k] = 0;
				}
				break;
			}
			for (int e = 0; e < got; e++)
			{
				int			k;
				int			next;

				if (occurred[e].events & WL_LATCH_SET)
				{
					ResetLatch(MyLatch);
					CHECK_FOR_INTERRUPTS();
					continue;
				}
				k = (int) (intptr_t) occurred[e].user_data;
				if (events[k] == 0 || !(occurred[e].events & events[k]))
					continue;
				next = rl_node_step(nodes[k], replies + start[k], nb[k], &have[k]);
				if (next <= 0)
				{
					if (next < 0)
					{
						rl_free_replies(replies + start[k], nb[k]);
						ok[k] = false;
					}
					events[k] = 0;
					active--;
					changed = true;
				}
				else if ((uint32) next != events[k])
				{
					events[k] = next;
					ModifyWaitEvent(set, occurred[e].pos, next, NULL);
				}
			}
			if (changed)
			{
				FreeWaitEventSet(set);
				set = NULL;
			}
		}
	}
	PG_FINALLY();
	{
		if (set != NULL)
			FreeWaitEventSet(set);
	}
	PG_END_TRY();
	pfree(events);
	pfree(have);
	pfree(occurred);
}

/* Runs the caller's wait work (rl_conn_set_wait_work), if any. */
void
rl_conn_wait_work(void)
{
	if (rl_wait_work != NULL)
		rl_wait_work();
}

/* A round trip on the current node (rl_conn_ready readied it). */
bool
rl_conn_roundtrip(RlCommand *cmds, int n, redisReply **replies,
				  TimestampTz deadline, bool overlap)
{
	return rl_node_roundtrip(rl_conn_cur, cmds, n, replies, deadline, overlap);
}
