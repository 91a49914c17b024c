/*-------------------------------------------------------------------------
 *
 * rl_engine.h
 *	  The engine: what the SQL entry points and the triggers call to check,
 *	  reset and report, whatever the store.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_engine.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ENGINE_H
#define RL_ENGINE_H

#include "rl_types.h"

/*
 * Keys per check of a statement (one script run in Redis).  A script blocks Redis while it runs, 12 to 30 us
 * a key on the reference machine (test/t/011_redis_work.pl measures it),
 * so a chunk of 64 keys holds every other client back for one or two
 * milliseconds, whatever the statement.  Chunks of 32 halved the wait of
 * a caller beside six statements of 10 000 keys, but added 5 % to a
 * 100 000-row INSERT of 1000 keys (test/bench/run.sh); 64 add about 1 %.
 */
#define RL_STATEMENT_CHUNK	64


/* Each key its own check of one limiter (rl_allow, rl_peek, batches ...). */
extern void rl_engine_check_keys(const RlLimiter *limiter, char **keys,
								 int *keylens, const int64 *costs, int n,
								 RlAnswer *answers);

/* Rules checked together, all or nothing (layered rules, the row trigger). */
extern int	rl_engine_check_rules(char **store_keys, const RlLimiter *limiters,
								  const int64 *costs, int n, RlAnswer *answer);

/* A statement's keys of one limiter (the statement trigger). */
extern int	rl_engine_check_statement(char **store_keys,
									  const RlLimiter *limiter,
									  const int64 *costs, int n,
									  void (*wait_work) (void),
									  RlAnswer *answer);

/* A concurrency slot held for the session (rl_hold), and its release. */
extern int64 rl_engine_hold(const RlLimiter *limiter, char *key, int keylen,
							int64 cost, RlAnswer *answer);
extern bool rl_engine_release(int64 holder);

/* A check its caller refused itself, counted as the engine counts one. */
extern void rl_engine_count_refusal(char *store_key, const RlLimiter *limiter);

/* Forgets limiters' state (rl_reset); true if any had one. */
extern bool rl_engine_reset(char **store_keys, const RlLimiter *limiters,
							int n);

/* rl_status(): what this backend knows of the Redis store. */
extern void rl_engine_status(const char **endpoint, bool *connected,
							 const char **server, const char **last_error,
							 TimestampTz *last_error_at);

/*
 * rl_ping(): the store of ratelimit.engine reached now, a row per server
 * into rows[0..return); an ERROR when one cannot be used.
 */
extern int	rl_engine_probe(RlProbeRow *rows, int max);

/* _PG_init: the stores' shared memory and hooks. */
extern void rl_engine_init(void);

#endif							/* RL_ENGINE_H */
