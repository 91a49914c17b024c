--
-- The README's examples, as written there
--
-- pg_regress creates the database afresh and its OID is part of every
-- Redis key, so no state of an earlier run can leak in.
--
-- The clock is pinned at 1700000000000 ms (20 s into a minute) so that
-- every wait below is exact.
SET ratelimit.test_clock_ms = 1700000000000;

--
-- 1. A procedure that throttles an expensive action and reports the wait
--
CREATE TABLE reports (
    id bigserial PRIMARY KEY,
    owner text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now()
);

CREATE PROCEDURE request_report(p_owner text, INOUT report_id bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    r rl_result;
BEGIN
    SELECT * INTO r FROM rl_allow('report:' || p_owner, 'token_bucket', 3, '1 hour');
    IF NOT r.allowed THEN
        RAISE EXCEPTION 'too many reports for %', p_owner
            USING ERRCODE = 'PT429',
                  DETAIL = format('Try again in %s seconds.', ceil(r.retry_after_ms / 1000.0)),
                  HINT = 'Three reports per hour are allowed.';
    END IF;
    INSERT INTO reports (owner) VALUES (p_owner) RETURNING id INTO report_id;
END $$;

CALL request_report('alice');
CALL request_report('alice');
CALL request_report('alice');
CALL request_report('alice');
CALL request_report('bob');

--
-- 2. A per-tenant limit read from a plans table
--
CREATE TABLE plans (
    plan text PRIMARY KEY,
    requests_per_minute bigint NOT NULL
);
CREATE TABLE tenants (
    tenant_id int PRIMARY KEY,
    plan text NOT NULL REFERENCES plans
);
INSERT INTO plans VALUES ('free', 2), ('pro', 5);
INSERT INTO tenants VALUES (1, 'free'), (2, 'pro');

CREATE FUNCTION tenant_allow(p_tenant int) RETURNS rl_result
LANGUAGE plpgsql AS $$
DECLARE
    quota bigint;
    r rl_result;
BEGIN
    SELECT p.requests_per_minute INTO STRICT quota
    FROM tenants t JOIN plans p USING (plan)
    WHERE t.tenant_id = p_tenant;
    SELECT * INTO r FROM rl_allow('tenant:' || p_tenant, 'sliding_log', quota, '1 minute');
    RETURN r;
END $$;

SELECT n, (tenant_allow(1)).allowed FROM generate_series(1, 3) n;
-- The tenant upgrades: the new quota is a new limiter (a limiter is its
-- key, algorithm, limit, window and burst), which starts empty: 4 left
-- after this call; the old quota's count is left to expire.
UPDATE tenants SET plan = 'pro' WHERE tenant_id = 1;
SELECT * FROM tenant_allow(1);
-- An unknown tenant is an error, not a free pass.
SELECT * FROM tenant_allow(3);

--
-- 3. A row trigger: at most 10 comments per author per minute
--
CREATE TABLE comments (
    id bigserial PRIMARY KEY,
    author_id int NOT NULL,
    body text NOT NULL
);
CREATE TRIGGER comments_throttle BEFORE INSERT ON comments
    FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'sliding_log', '10', '1 minute');

INSERT INTO comments (author_id, body)
    SELECT 42, 'comment ' || g FROM generate_series(1, 10) g;
INSERT INTO comments (author_id, body) VALUES (42, 'one too many');
INSERT INTO comments (author_id, body) VALUES (7, 'another author');
-- Where the trigger's limiter stands (its key names table, column, value):
SELECT * FROM rl_peek_layered('public.comments:author_id=''42''',
                              ARRAY[('sliding_log', 10, '1 minute')]::rl_rule[]);

--
-- 4. A bulk COPY under a statement trigger: one check per statement
--
CREATE TABLE readings (
    device_id int NOT NULL,
    value float8 NOT NULL
);
CREATE TRIGGER readings_throttle AFTER INSERT ON readings
    REFERENCING NEW TABLE AS rl_new
    FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('device_id', 'token_bucket', '5', '1 hour');

COPY readings FROM STDIN (FORMAT csv);
1,20.5
1,20.7
2,19.0
\.
-- Device 1 has 3 tokens left, so 4 more rows fail the whole COPY, device
-- 2's row included; nothing is stored and nothing is charged.
COPY readings FROM STDIN (FORMAT csv);
1,20.9
1,21.0
2,19.1
1,21.2
1,21.3
\.
SELECT device_id, count(*) FROM readings GROUP BY 1 ORDER BY 1;

--
-- 5. PostgREST: a pre-request function, its grants, and the 429
--
-- README's role web_anon goes by a name of this suite's own here, so
-- that a run against a user's server never touches a role it did not
-- create.
CREATE ROLE regress_rl_web_anon NOLOGIN;
CREATE SCHEMA api;
CREATE FUNCTION api.pre_request() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- 10 requests per minute per user (JWT "sub"), else per client address
    PERFORM rl_postgrest_guard('gcra', 10, '1 minute');
END $$;
REVOKE EXECUTE ON FUNCTION api.pre_request() FROM PUBLIC;
GRANT USAGE ON SCHEMA api TO regress_rl_web_anon;
GRANT EXECUTE ON FUNCTION api.pre_request() TO regress_rl_web_anon;
GRANT EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text, bigint) TO regress_rl_web_anon;

-- What PostgREST does for GET /items with a JWT whose sub is "alice":
BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
SET LOCAL ROLE regress_rl_web_anon;
SELECT set_config('request.jwt.claims', '{"sub":"alice","role":"regress_rl_web_anon"}', true) IS NOT NULL AS claims,
       set_config('request.method', 'GET', true) IS NOT NULL AS method;
SELECT api.pre_request();
SELECT current_setting('response.headers');
-- Nine more requests in the same second, then the eleventh:
SELECT count(*) FROM (SELECT api.pre_request() FROM generate_series(1, 9)) requests;
SELECT api.pre_request();
ROLLBACK;

DROP PROCEDURE request_report(text, bigint);
DROP FUNCTION tenant_allow(int);
DROP TABLE reports, tenants, plans, comments, readings;
DROP SCHEMA api CASCADE;
REVOKE EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text, bigint) FROM regress_rl_web_anon;
DROP ROLE regress_rl_web_anon;
