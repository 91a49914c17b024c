/* sql/ratelimit--0.2.0--0.3.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit

-- 0.3.0 adds to the SQL surface; every object below is also in
-- sql/ratelimit--0.3.0.sql, and test/t/009_upgrade.pl checks that both
-- give the same catalog.
