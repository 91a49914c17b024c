# test/t/035_policies.pl
#
# Named policies (issue 24) under real sessions, real time and real
# servers:
#   1. a change under concurrent load: 8 pgbench sessions call
#      rl_allow(one key, a sliding_log policy) while another session
#      raises and lowers the policy's limit eight times; every admission is
#      recorded with the clock around it, and no admitted call ever had
#      more calls in the window before it than the limit in force allowed
#      (doc/algorithms.md, "When a policy changes": a sliding log's calls
#      are counted under the new limit at once);
#   2. a change reaches another, already-connected session at its next
#      call after the COMMIT, on the same link (no reconnect), raised and
#      lowered;
#   3. a hot standby: a standby session that had cached the policy uses
#      the new limit once the UPDATE on the primary is replayed;
#   4. Redis Cluster: the calls by name go to the master of each key's
#      slot and count exactly.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_load fact fault_mark fault_done);
use RLCluster;

my $redis = RLRedis->new(name => 'r035');
my $node = rl_node('c035', $redis, qq{
ratelimit.deny_cache = off
wal_level = replica
max_wal_senders = 4
hot_standby = on
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

# 1. A change under concurrent load.
my $window = 1;    # seconds
my @limits = (10, 3, 25, 5, 15, 2, 20, 8, 12);
$node->safe_psql('postgres', qq{
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('p035.log', 'sliding_log', $limits[0], '$window second');
CREATE TABLE adm (id bigserial PRIMARY KEY, s timestamptz, e timestamptz);
CREATE TABLE chg (v int PRIMARY KEY, lim bigint, c_start timestamptz, c_end timestamptz);
INSERT INTO chg VALUES (0, $limits[0], '-infinity', '-infinity');
});
{
	# s: the statement's start, before the call; e: after it.  The
	# admission happened in Redis between the two.
	my $stop = rl_load($node, 8,
		"INSERT INTO adm (s, e) SELECT statement_timestamp(), clock_timestamp() "
		  . "FROM rl_allow('hot', 'p035.log') r WHERE r.allowed;");
	usleep(300_000);
	for my $v (1 .. $#limits)
	{
		# c_start before the commit, c_end after it: the change is in
		# between, and a call that starts after c_end uses it.
		$node->safe_psql('postgres', qq{
BEGIN;
UPDATE rl_policies SET "limit" = $limits[$v] WHERE name = 'p035.log';
INSERT INTO chg VALUES ($v, $limits[$v], clock_timestamp(), NULL);
COMMIT;
UPDATE chg SET c_end = clock_timestamp() WHERE v = $v;
});
		usleep(350_000);
	}
	usleep(300_000);
	my ($clean, $calls, $wrong) = $stop->();
	is($clean, 8, 'load: 8 sessions ran until stopped') or diag $wrong;

	my ($admitted) = $node->safe_psql('postgres', 'SELECT count(*) FROM adm');
	note "load: $calls calls, $admitted admitted, " . scalar(@limits) . ' limits';
	ok($calls > $admitted * 2, "load: most calls were denied ($admitted of $calls admitted)");

	# For each admission i: the limits that may have been in force for it
	# (the version committed before its statement started, up to the last
	# one whose commit began before it ended), and the admissions certainly
	# in the window before it (n: each j whose whole call lies in
	# (e_i - window, s_i], and i itself).  The rule: n is at most the
	# largest of those limits.  Calls that overlap i cannot be placed, so
	# n may miss a few (concurrent admissions right after a raise); nup
	# counts every admission that may be in the window, and reaching the
	# limit with it shows the load filled the window, so that the check
	# had something to hold.
	my $check = qq{
WITH b AS (
	SELECT a.id, a.s, a.e,
		   (SELECT max(c.lim) FROM chg c
			WHERE c.v BETWEEN (SELECT max(v) FROM chg WHERE c_end < a.s)
						  AND (SELECT max(v) FROM chg WHERE c_start <= a.e)) AS bound
	FROM adm a),
n AS (
	SELECT b.id, b.bound,
		   (SELECT count(*) FROM adm j
			WHERE j.id = b.id
			   OR (j.s > b.e - interval '$window second' AND j.e <= b.s)) AS n,
		   (SELECT count(*) FROM adm j
			WHERE j.e > b.s - interval '$window second' AND j.s <= b.e) AS nup
	FROM b)
SELECT count(*) FILTER (WHERE n > bound),
	   count(*) FILTER (WHERE n = bound),
	   count(*) FILTER (WHERE nup >= bound),
	   max(n), max(nup - n), count(*)
FROM n};
	my ($over, $at, $full, $maxn, $slack, $all) =
	  split /\|/, $node->safe_psql('postgres', $check);
	note "load: $over admissions over the limit in force, $at at it, $full in a full window, "
	  . "at most $maxn certainly in a window, at most $slack that could not be placed";
	is($over, 0, 'load: no admission had more calls in its window than the limit in force allowed');
	ok($full > 0, "load: the load filled the window to the limit ($full admissions), so the check can fail");
	fact('count_checks.035', $all);
	fact('miscounted.035', $over);
	fact('calls.035', $calls);
	fact('figure.035', "8 sessions on one key while a sliding_log policy's limit changed "
		  . (scalar(@limits) - 1) . " times: $admitted of $calls admitted, none over the limit in force");

	# The same rule seen from the other side: in the last window, after the
	# last change had long been in force, at most its limit.
	my ($tail) = $node->safe_psql('postgres', qq{
SELECT count(*) FROM adm
WHERE s > (SELECT c_end FROM chg WHERE v = $#limits)
  AND s > (SELECT max(e) FROM adm) - interval '$window second'});
	ok($tail <= $limits[-1], "load: the last window held at most the last limit ($tail <= $limits[-1])");
}

# 2. A change reaches a connected session at its next call.
{
	$node->safe_psql('postgres', q{
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('p035.fw', 'fixed_window', 5, '1 hour')});
	my $a = rl_session($node);
	my ($pid) = rl_run($a, 'SELECT pg_backend_pid()');
	is((rl_run($a, "SELECT allowed, remaining FROM rl_allow('k2', 'p035.fw')"))[0], 't|4',
		'session A: first call under limit 5');
	my ($connects) = rl_run($a, 'SELECT connects FROM rl_status()');
	$node->safe_psql('postgres', q{UPDATE rl_policies SET "limit" = 50 WHERE name = 'p035.fw'});
	is((rl_run($a, "SELECT allowed, remaining FROM rl_allow('k2', 'p035.fw')"))[0], 't|48',
		'session A: the next call after the COMMIT uses the raised limit, the use kept');
	$node->safe_psql('postgres', q{UPDATE rl_policies SET "limit" = 2 WHERE name = 'p035.fw'});
	like((rl_run($a, "SELECT allowed, remaining FROM rl_allow('k2', 'p035.fw')"))[0], qr/^f\|0$/,
		'session A: the lowered limit at once: denied, nothing given');
	is((rl_run($a, 'SELECT pg_backend_pid(), connects FROM rl_status()'))[0], "$pid|$connects",
		'session A: same backend, same link (no reconnect)');

	# Not before the COMMIT: an open transaction's change is its own.
	my $b = rl_session($node);
	rl_run($b, 'BEGIN');
	rl_run($b, q{UPDATE rl_policies SET "limit" = 100 WHERE name = 'p035.fw'});
	like((rl_run($a, "SELECT allowed, remaining FROM rl_allow('k2', 'p035.fw')"))[0], qr/^f\|0$/,
		'session A: an uncommitted change is not seen');
	rl_run($b, 'COMMIT');
	is((rl_run($a, "SELECT allowed, remaining FROM rl_allow('k2', 'p035.fw')"))[0], 't|97',
		'session A: seen at the next call after the COMMIT');
	$a->quit;
	$b->quit;
}

# 3. A hot standby.
{
	$node->safe_psql('postgres', q{
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('p035.sb', 'fixed_window', 5, '1 hour')});
	$node->backup('b035');
	my $standby = PostgreSQL::Test::Cluster->new('s035');
	$standby->init_from_backup($node, 'b035', has_streaming => 1);
	$standby->start;
	$node->wait_for_catchup($standby);
	is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby: in recovery');
	my $s = rl_session($standby);
	is((rl_run($s, "SELECT allowed, remaining FROM rl_allow('k3', 'p035.sb')"))[0], 't|4',
		'standby: a call by name, the policy cached');
	is((rl_run($s, "SELECT allowed, remaining FROM rl_allow('k3', 'p035.sb')"))[0], 't|3',
		'standby: again from the cache');
	$node->safe_psql('postgres', q{UPDATE rl_policies SET "limit" = 50 WHERE name = 'p035.sb'});
	$node->wait_for_catchup($standby);
	is((rl_run($s, "SELECT allowed, remaining FROM rl_allow('k3', 'p035.sb')"))[0], 't|47',
		'standby: after replay, the same session uses the new limit, the use kept');
	$node->safe_psql('postgres', q{UPDATE rl_policies SET "limit" = 3 WHERE name = 'p035.sb'});
	$node->wait_for_catchup($standby);
	like((rl_run($s, "SELECT allowed, remaining FROM rl_allow('k3', 'p035.sb')"))[0], qr/^f\|0$/,
		'standby: a lowered limit after replay: denied');
	my $p = rl_session($node);
	is((rl_run($p, "SELECT remaining FROM rl_peek('k3', 'p035.sb')"))[0], '0',
		'primary: the same limiter, shared through Redis');
	$p->quit;
	$s->quit;
	$standby->stop;
}

# 4. Redis Cluster.
{
	my $rc = RLCluster->new(name => 'c35_', masters => 3, replicas => 0);
	my @masters = $rc->masters;
	my $seeds = $rc->seeds;
	my $cnode = rl_node('c035c', $masters[0], qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
ratelimit.deny_cache = off
});
	my $cdb = $cnode->safe_psql('postgres',
		'SELECT oid FROM pg_database WHERE datname = current_database()');
	$cnode->safe_psql('postgres', q{
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('p035.c', 'fixed_window', 3, '1 hour')});
	my $keys = 30;
	my ($single) = $cnode->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE (rl_allow('ck:' || k, 'p035.c', 1 + 0 * i)).allowed)
FROM generate_series(1, $keys) k, generate_series(1, 2) i});
	is($single, 2 * $keys, 'cluster: two calls by name per key, all admitted');
	my ($many) = $cnode->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE remaining = 0)
FROM rl_allow_many(ARRAY(SELECT 'ck:' || k FROM generate_series(1, $keys) k), 'p035.c')});
	is($many, "$keys|$keys", 'cluster: a batch by name over every master: the third, exactly');
	my ($denied) = $cnode->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE NOT (rl_allow('ck:' || k, 'p035.c')).allowed)
FROM generate_series(1, $keys) k});
	is($denied, $keys, 'cluster: the fourth call of every key denied');

	# Each key's state is on the master of its slot, and only there.
	my (%per, @misplaced);
	for my $k (1 .. $keys)
	{
		my $rkey = "rl:{$cdb:ck:$k}:policy:p035.c/fixed_window";
		my $home = $rc->master_of_key($rkey);
		# A master that does not serve the slot answers MOVED (an error).
		my @holders = grep { my $r = $_->cmd('EXISTS', $rkey); !ref($r) && $r } @masters;
		push @misplaced, "ck:$k" unless @holders == 1 && $holders[0]->port == $home->port;
		$per{ $home->port }++;
	}
	is(scalar @misplaced, 0, "cluster: every key's state on the master of its slot")
	  or diag "@misplaced";
	is(scalar(keys %per), 3, 'cluster: the keys spread over all three masters ('
		  . join(', ', map { "$_: $per{$_}" } sort keys %per) . ')');
	$cnode->safe_psql('postgres', q{UPDATE rl_policies SET "limit" = 5 WHERE name = 'p035.c'});
	my ($after) = $cnode->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE (rl_allow('ck:' || k, 'p035.c')).remaining = 1)
FROM generate_series(1, $keys) k});
	is($after, $keys, 'cluster: the limit raised to 5, each key admitted once more, its use kept');
	$cnode->stop;
}

done_testing();
