# test/t/037_refunds.pl
#
# Refunds of aborted work (issue 25) under real sessions and real faults:
#   1. 16 writers insert 1 to 5 rows per statement into tables under a
#      row trigger and a statement trigger (sliding_log, 100 an hour),
#      catching PT429 in a PL/pgSQL block and rolling back one transaction
#      in four: the rows stored equal the rows the limiter charged, for
#      both triggers.  The same load on a row trigger with refund=off
#      charges more than it stores (what 0.5.0 did), so the check can fail;
#   2. a refund lost to a stalled Redis: the abort waits no longer than
#      the command timeout, warns, counts it in rl_stats.refunds_lost, and
#      the refund is never applied twice (after Redis resumes the state is
#      either charged or refunded once); a refund to a Redis that is down
#      is lost at once and counted;
#   3. a prepared transaction is final at PREPARE: ROLLBACK PREPARED gives
#      nothing back;
#   4. Redis Cluster: an aborted batch over keys of several hash slots is
#      refunded on every master, one script call per master.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_load);
use RLCluster;

my $redis = RLRedis->new(name => 'r037');
my $node = rl_node('c037', $redis, qq{
ratelimit.deny_cache = off
max_prepared_transactions = 4
});

# 1. 16 writers.  w_row and w_stmt refund (the triggers' default), w_off
# does not.  ins(t, n) inserts n rows into table t and returns how many
# were stored; a denial is caught (its block's work rolled back).
$node->safe_psql('postgres', q{
CREATE TABLE w_row (k int, v int);
CREATE TRIGGER w_row_limit BEFORE INSERT ON w_row FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('k', 'sliding_log', '100', '1 hour');
CREATE TABLE w_stmt (k int, v int);
CREATE TRIGGER w_stmt_limit AFTER INSERT ON w_stmt REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('k', 'sliding_log', '100', '1 hour');
CREATE TABLE w_off (k int, v int);
CREATE TRIGGER w_off_limit BEFORE INSERT ON w_off FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('k', 'sliding_log', '100', '1 hour', 'refund=off');
CREATE FUNCTION ins(t text, n int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('INSERT INTO %I SELECT 1, g FROM generate_series(1, $1) g', t)
		USING n;
	RETURN n;
EXCEPTION WHEN sqlstate 'PT429' THEN
	RETURN 0;
END $$;
});

sub writers
{
	my ($table) = @_;
	my $stop = rl_load($node, 16, qq{\\set n random(1, 5)
\\set r random(0, 3)
BEGIN;
SELECT ins('$table', :n);
\\if :r = 0
ROLLBACK;
\\else
COMMIT;
\\endif});
	# Until the limit is reached and held a while.
	my $t0 = time;
	while (time - $t0 < 60)
	{
		my $left = $node->safe_psql('postgres',
			"SELECT remaining FROM rl_peek('public.$table:k=''1''', 'sliding_log', 100, '1 hour')");
		last if $left eq '0';
		usleep(100_000);
	}
	usleep(500_000);
	my ($clean, $calls, $wrong) = $stop->();
	is($clean, 16, "$table: 16 writers ran until stopped") or diag $wrong;
	my $stored = $node->safe_psql('postgres', "SELECT count(*) FROM $table");
	my $charged = $node->safe_psql('postgres',
		"SELECT 100 - remaining FROM rl_peek('public.$table:k=''1''', 'sliding_log', 100, '1 hour')");
	note "$table: $calls transactions, $stored rows stored, $charged charged";
	return ($stored, $charged, $calls);
}

my $s0 = $node->safe_psql('postgres', 'SELECT refunds FROM rl_stats');
for my $table ('w_row', 'w_stmt')
{
	my ($stored, $charged, $calls) = writers($table);
	ok($calls > 100, "$table: the writers tried more than the limit ($calls transactions)");
	is($charged, 100, "$table: the limit was reached");
	is($stored, $charged, "$table: rows stored ($stored) = rows charged ($charged)");
}
ok($node->safe_psql('postgres', 'SELECT refunds FROM rl_stats') > $s0,
	'rl_stats counts the refunds given back');
{
	my ($stored, $charged) = writers('w_off');
	ok($stored < $charged,
		"w_off (refund=off): rows stored ($stored) < rows charged ($charged), as without refunds");
}

# 2. A refund lost to a stalled Redis, then to one that is down.
$node->safe_psql('postgres', q{
INSERT INTO rl_policies (name, algo, "limit", "window", refund_on_abort)
VALUES ('p037', 'fixed_window', 10, '1 hour', true);
});
{
	my $s = rl_session($node);
	rl_run($s, "SET ratelimit.test_clock_ms = 1800000000000;
		SET ratelimit.command_timeout = 300;
		SELECT rl_allow('stall', 'p037', 3)");
	my ($lost0) = rl_run($s, 'SELECT refunds_lost FROM rl_stats');
	rl_run($s, "BEGIN; SELECT rl_allow('stall', 'p037', 2)");
	$redis->stall;
	my ($out, $err, $took) = rl_run($s, 'ROLLBACK');
	$redis->resume;
	like($err, qr/WARNING:.*could not give back 1 refund or concurrency slot/,
		'stalled: the abort warns that the refund was lost');
	ok($took < 5, sprintf('stalled: the abort took %.2f s (command timeout 0.3 s)', $took));
	my ($lost1) = rl_run($s, 'SELECT refunds_lost FROM rl_stats');
	is($lost1 - $lost0, 1, 'stalled: rl_stats.refunds_lost counts it');
	# The node rests for ratelimit.retry_interval after the timeout: until
	# then calls get the failure policy's answer (a NULL remaining).
	my $used;
	for (1 .. 100)
	{
		($used) = rl_run($s, "SELECT 10 - remaining FROM rl_peek('stall', 'p037')");
		last if defined $used && $used ne '';
		usleep(50_000);
	}
	# Redis may still run the command it had read before it stalled: the
	# refund applied once (3 used) or not at all (5), never twice (1).
	ok($used == 3 || $used == 5, "stalled: the state holds $used used (3 or 5), the refund never applied twice");
	my ($again) = rl_run($s, "SELECT 10 - remaining FROM rl_peek('stall', 'p037')");
	is($again, $used, 'stalled: nothing is sent again later');

	# Down: the refund is lost at once, and not sent once Redis is back.
	my ($in) = rl_run($s, "BEGIN; SELECT remaining FROM rl_allow('down', 'p037', 2)");
	is($in, '8', 'down: the call was answered by Redis before it went down');
	$redis->kill9;
	($out, $err, $took) = rl_run($s, 'ROLLBACK');
	my ($lost2, $refunds2) = split /\|/, (rl_run($s, 'SELECT refunds_lost, refunds FROM rl_stats'))[0];
	is($lost2 - $lost1, 1, 'down: the refund is counted as lost');
	ok($took < 5, sprintf('down: the abort took %.2f s', $took));
	$redis->start;
	for (1 .. 100)
	{
		my ($back) = rl_run($s, "SELECT remaining FROM rl_allow('back', 'p037')");
		last if defined $back && $back ne '';
		usleep(50_000);
	}
	my ($refunds3) = rl_run($s, 'SELECT refunds FROM rl_stats');
	is($refunds3, $refunds2, 'down: nothing is sent again once Redis is back');
	$s->quit;
}

# 3. Prepared transactions are final at PREPARE.
{
	$node->safe_psql('postgres', q{
SET ratelimit.test_clock_ms = 1800000000000;
BEGIN;
SELECT rl_allow('prep', 'p037', 4);
PREPARE TRANSACTION 'p037';
});
	$node->safe_psql('postgres', "ROLLBACK PREPARED 'p037'");
	is($node->safe_psql('postgres',
		"SET ratelimit.test_clock_ms = 1800000000000; SELECT 10 - remaining FROM rl_peek('prep', 'p037')"),
		'4', 'prepared: ROLLBACK PREPARED gives nothing back (final at PREPARE)');
}

# 4. Redis Cluster: an aborted batch over keys of several slots.
{
	my $rc = RLCluster->new(name => 'c37_', masters => 3, replicas => 0);
	my $seeds = $rc->seeds;
	my $s = rl_session($node);
	rl_run($s, "SET ratelimit.redis_mode = 'cluster'; SET ratelimit.redis_nodes = '$seeds';
		SET ratelimit.test_clock_ms = 1800000000000");
	my @keys = map { "ck$_" } 1 .. 12;
	my $arr = 'ARRAY[' . join(',', map { "'$_'" } @keys) . ']';
	my $dboid = $node->safe_psql('postgres',
		'SELECT oid FROM pg_database WHERE datname = current_database()');
	my %slots = map { RLCluster::slot_of("{$dboid:$_}") => 1 } @keys;
	my %masters = map { $rc->master_of_slot($_)->port => 1 } keys %slots;
	ok(scalar(keys %masters) >= 2, 'cluster: the keys span ' . scalar(keys %masters) . ' masters');
	rl_run($s, "SELECT count(*) FROM rl_allow_many($arr, 'p037', 1)");
	my $runs = sub { my $n = 0; $n += $_->script_runs for $rc->nodes; $n };
	my $before = $runs->();
	my ($out) = rl_run($s, "BEGIN; SELECT count(*) FILTER (WHERE allowed) FROM rl_allow_many($arr, 'p037', 3); ROLLBACK;");
	is($out, '12', 'cluster: the batch was admitted on every key');
	is($runs->() - $before, 2 * scalar(keys %slots),
		'cluster: one script call per hash slot to check, one per hash slot to refund');
	my ($used) = rl_run($s, "SELECT string_agg((10 - remaining)::text, ',') FROM unnest($arr) k, rl_peek(k, 'p037')");
	is($used, join(',', (1) x 12), 'cluster: every key of every slot got its 3 back');
	$s->quit;
}

done_testing();
