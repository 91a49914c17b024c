/*-------------------------------------------------------------------------
 *
 * rl_compat.h
 *	  What differs between the PostgreSQL (15 to 18) and hiredis (0.14,
 *	  1.x) versions the extension builds against, in one place.
 *
 * Each difference is a small wrapper named for what the extension needs,
 * chosen by PG_VERSION_NUM or HIREDIS_MAJOR; the call sites use the
 * wrapper and never test a version themselves.  Built and tested on
 * PostgreSQL 15, 17 and 18; 16 builds through the same guards (15's side
 * of each), untested.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_COMPAT_H
#define RL_COMPAT_H

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#if PG_VERSION_NUM >= 170000
#include "storage/procnumber.h"
#else
#include "storage/backendid.h"
#endif

/*
 * This backend's number among the regular backends, from 1 to
 * MaxBackends; 0 or less in a process that has none.  PostgreSQL 17
 * replaced the backend id (1 .. MaxBackends) by the PGPROC's index,
 * MyProcNumber (0 .. MaxBackends - 1 for regular backends).
 */
static inline int
rl_backend_number(void)
{
#if PG_VERSION_NUM >= 170000
	return MyProcNumber == INVALID_PROC_NUMBER ? 0 : MyProcNumber + 1;
#else
	return MyBackendId == InvalidBackendId ? 0 : MyBackendId;
#endif
}

/*
 * A wait set that its maker frees on every path (FreeWaitEventSet).
 * Before 17 it is allocated in context; 17 allocates it in
 * TopMemoryContext and takes instead the resource owner that would free
 * it at abort: none, since ours outlive transactions or are freed by
 * their maker.
 */
static inline WaitEventSet *
rl_create_wait_event_set(MemoryContext context, int nevents)
{
#if PG_VERSION_NUM >= 170000
	(void) context;
	return CreateWaitEventSet(NULL, nevents);
#else
	return CreateWaitEventSet(context, nevents);
#endif
}

/*
 * A function that never returns: PostgreSQL 18 replaced
 * pg_attribute_noreturn(), written after the declarator, by pg_noreturn,
 * written before it; before 18 the attribute is gcc's, which may stand
 * there too.  Declared as "extern rl_noreturn void f(...);".
 */
#if PG_VERSION_NUM >= 180000
#define rl_noreturn pg_noreturn
#else
#define rl_noreturn pg_attribute_noreturn()
#endif

/*
 * An ExecutorRun_hook's parameters, and the same passed on to the next
 * hook or standard_ExecutorRun: PostgreSQL 18 dropped execute_once.
 */
#if PG_VERSION_NUM >= 180000
#define RL_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define RL_EXECUTOR_RUN_ARGS	queryDesc, direction, count
#else
#define RL_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count, bool execute_once
#define RL_EXECUTOR_RUN_ARGS	queryDesc, direction, count, execute_once
#endif

#endif							/* RL_COMPAT_H */

/*
 * hiredis, for the files that include it first (the header is included
 * everywhere through rl_types.h, hiredis only where Redis is spoken):
 * the element count of the createArray reply builder is an int in 0.14,
 * a size_t from 1.0 on.
 */
#if defined(HIREDIS_MAJOR) && !defined(RL_COMPAT_HIREDIS)
#define RL_COMPAT_HIREDIS
#if HIREDIS_MAJOR >= 1
typedef size_t rl_hiredis_elements;
#else
typedef int rl_hiredis_elements;
#endif
#endif
