/*-------------------------------------------------------------------------
 *
 * rl_postgrest.h
 *	  Answers in the form PostgREST turns into HTTP, for the guard and the
 *	  triggers.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_postgrest.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POSTGREST_H
#define RL_POSTGREST_H

#include "rl_types.h"

extern bool rl_in_postgrest_request(void);
extern char *rl_window_text(int64 window_us);
extern rl_noreturn void rl_raise_postgrest(const char *message, const char *details,
										   const char *hint, const RlAnswer *answer,
										   const RlLimiter *limiter);

#endif							/* RL_POSTGREST_H */
