/*-------------------------------------------------------------------------
 *
 * rl_args.h
 *	  The SQL surface's arguments and results: checks that raise an ERROR
 *	  before any round trip, the store keys of a limiter, the rl_result row.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_args.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ARGS_H
#define RL_ARGS_H

#include "fmgr.h"
#include "access/htup.h"
#include "access/tupdesc.h"
#include "utils/array.h"

#include "rl_guc.h"

extern RlAlgorithm rl_parse_algorithm(text *algo);
extern const char *rl_algorithm_name(RlAlgorithm algorithm);
extern int64 rl_window_us(Interval *window);
extern void rl_check_limiter(const RlLimiter *limiter);
extern int64 rl_burst_arg(FunctionCallInfo fcinfo, int argno);
extern int64 rl_check_burst(int64 burst);
extern void rl_check_cost(int64 cost, const RlLimiter *limiter);
extern char *rl_check_key(text *key, int *len);
extern bool rl_policy_name_ok(const char *name, int len);
extern void rl_check_policy_name(const char *name, int len);
extern int	rl_parse_failure_mode(const char *mode);
extern char *rl_redis_key(const char *key, int keylen, const RlLimiter *limiter);
extern char *rl_redis_key_in(char *buf, int size, const char *key, int keylen,
							 const RlLimiter *limiter);
extern const char *rl_clock_arg(void);
extern void rl_require_args(FunctionCallInfo fcinfo, int nargs);
extern Datum *rl_array_elements(ArrayType *arr, const char *what, int *n);

/* The rl_result row of an answer. */
extern HeapTuple rl_answer_tuple(TupleDesc desc, const RlAnswer *answer);

#endif							/* RL_ARGS_H */
