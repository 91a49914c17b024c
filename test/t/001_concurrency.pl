# test/t/001_concurrency.pl
#
# Exact counts under concurrency: many sessions hammering one key never
# get more than the limit, each "remaining" value is handed out once,
# independent keys do not disturb each other, the sliding log counts
# calls that share a microsecond, and the statement trigger charges
# exactly the rows it lets through.  pgbench drives the sessions; every
# answer is recorded in an UNLOGGED table and checked against Redis.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use IPC::Run;

use RLRedis qw(rl_node fact);

my $redis = RLRedis->new(name => 'r001');
my $node = rl_node('c001', $redis);
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
my $script_no = 0;

# Runs pgbench with one script; (exit code, stdout, stderr, seconds).
sub pgbench
{
	my ($clients, $tx, $script) = @_;
	my $file = $node->basedir . '/bench' . ++$script_no . '.sql';
	PostgreSQL::Test::Utils::append_to_file($file, $script);
	my ($out, $err) = ('', '');
	my $t0 = time;
	IPC::Run::run [
		'pgbench', '-n', '-c', $clients, '-j', 2, '-t', $tx,
		'-f', $file, '-h', $node->host, '-p', $node->port, 'postgres'
	  ],
	  '<', \undef, '>', \$out, '2>', \$err;
	my $rc = $? >> 8;
	fact('calls.001', ($out =~ /actually processed: (\d+)/)[0] // 0);
	fact('clients.001', $clients);
	fact('pgbench_errors.001',
		(($out =~ /number of failed transactions: (\d+)/)[0] // 1) + ($rc ? 1 : 0));
	return ($rc, $out, $err, time - $t0);
}

# pgbench ran every transaction without a single error.
sub pgbench_clean
{
	my ($name, $rc, $out, $err, $total) = @_;
	is($rc, 0, "$name: pgbench exit code 0");
	like($out, qr/actually processed: $total\/$total/,
		"$name: pgbench processed all $total transactions");
	like($out, qr/number of failed transactions: 0 /,
		"$name: pgbench reports no failed transactions");
	unlike($err, qr/ERROR|FATAL/, "$name: pgbench stderr has no error");
}

# The Redis key of a limiter: key, algorithm, limit and window (in ms).
sub redis_key
{
	my ($key, $algo, $limit, $window_ms) = @_;
	return "rl:{$dboid:$key}:$algo:$limit:${window_ms}ms";
}

# Fixed and sliding windows of one day are aligned to midnight UTC: do not
# let a run straddle one, or the next window would rightly admit more.
my ($secs) = split /\n/, $redis->cli('TIME');
my $to_midnight = 86400 - $secs % 86400;
if ($to_midnight < 120)
{
	note "waiting ${to_midnight}s for midnight UTC to pass";
	sleep($to_midnight + 2);
}

$node->safe_psql('postgres',
	'CREATE UNLOGGED TABLE hits (algo text, allowed bool, remaining bigint)');

# 1. One hot key per algorithm, 32 clients x 40 calls, limit 100 per day.
my ($clients, $per_client, $limit) = (32, 40, 100);
my $total = $clients * $per_client;
for my $algo (
	qw(fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra)
  )
{
	my ($rc, $out, $err, $elapsed) = pgbench($clients, $per_client,
		"INSERT INTO hits SELECT '$algo', allowed, remaining "
		  . "FROM rl_allow('hot', '$algo', $limit, '1 day');\n");
	pgbench_clean("$algo hot key", $rc, $out, $err, $total);

	my ($allowed, $denied, $unknown, $distinct, $min, $max) = split /\|/,
	  $node->safe_psql(
		'postgres', qq{
		SELECT count(*) FILTER (WHERE allowed),
		       count(*) FILTER (WHERE NOT allowed),
		       count(*) FILTER (WHERE remaining IS NULL),
		       count(DISTINCT remaining) FILTER (WHERE allowed),
		       min(remaining) FILTER (WHERE allowed),
		       max(remaining) FILTER (WHERE allowed)
		FROM hits WHERE algo = '$algo'});

	# Refilling algorithms may earn limit x elapsed / window more units;
	# with a one-day window that is far below one unit.
	my $bound = $limit;
	$bound += int($elapsed * $limit / 86400)
	  if $algo =~ /^(token_bucket|leaky_bucket|gcra)$/;
	note sprintf("%s: %d calls in %.2f s: %d allowed, %d denied (bound %d)",
		$algo, $total, $elapsed, $allowed, $denied, $bound);
	is($unknown, 0, "$algo: every call was answered by Redis");
	ok($allowed >= $limit && $allowed <= $bound,
		"$algo: exactly the limit allowed ($allowed, bound $bound)");
	is($allowed + $denied, $total, "$algo: every call recorded");
	is($distinct, $allowed, "$algo: each remaining value handed out once");
	is($min, 0, "$algo: the last allowed call saw remaining 0");
	is($max, $limit - 1, "$algo: the first allowed call saw remaining limit-1");
	fact('allowed.001', $allowed);
	fact('denied.001', $denied);
	fact('count_checks.001', $total);
	fact('miscounted.001',
		($allowed < $limit ? $limit - $allowed : 0)
		  + ($allowed > $bound ? $allowed - $bound : 0)
		  + abs($allowed + $denied - $total) + abs($distinct - $allowed));

	# A sliding counter still needs its state through the next window; a
	# sliding log renews its TTL for half a window more than it needs.
	my $pttl = $redis->cli('PTTL', redis_key('hot', $algo, $limit, 86_400_000));
	my $maxttl = ($algo eq 'sliding_counter' ? 2 : $algo eq 'sliding_log' ? 1.5 : 1)
	  * 86_400_000;
	ok($pttl > 0 && $pttl <= $maxttl,
		"$algo: key has a TTL ($pttl ms, at most $maxttl)");
}
is($redis->fw_used(redis_key('hot', 'fixed_window', $limit, 86_400_000)),
	$limit, 'fixed_window: denied calls consumed nothing');
is($redis->cli('ZCARD', redis_key('hot', 'sliding_log', $limit, 86_400_000)),
	$limit, 'sliding_log: one log entry per allowed call');

# 2. 200 independent keys, limit 3, 5 calls each in random order, spread
# over the six algorithms and 25 parallel clients.
$node->safe_psql(
	'postgres', q{
	CREATE UNLOGGED TABLE slots (id int PRIMARY KEY, k int);
	INSERT INTO slots
		SELECT row_number() OVER (ORDER BY random()), k
		FROM generate_series(1, 200) k, generate_series(1, 5);
	CREATE SEQUENCE slot_seq;
	CREATE UNLOGGED TABLE khits (k int, allowed bool, remaining bigint);
});
{
	my ($rc, $out, $err, $elapsed) = pgbench(
		25, 40, q{
INSERT INTO khits
	SELECT s.k, r.allowed, r.remaining
	FROM (SELECT k FROM slots WHERE id = (SELECT nextval('slot_seq'))) s,
	LATERAL rl_allow('k' || s.k,
		(ARRAY['fixed_window', 'sliding_log', 'sliding_counter',
		       'token_bucket', 'leaky_bucket', 'gcra'])[s.k % 6 + 1],
		3, '1 day') r;
});
	pgbench_clean('independent keys', $rc, $out, $err, 1000);
	my ($keys, $wrong, $unknown) = split /\|/, $node->safe_psql(
		'postgres', q{
		SELECT count(*),
		       count(*) FILTER (WHERE a <> 3 OR n <> 5 OR u > 0)
		FROM (SELECT k, count(*) FILTER (WHERE allowed) a, count(*) n,
		             count(*) FILTER (WHERE remaining IS NULL) u
		      FROM khits GROUP BY k) x});
	note sprintf("independent keys: 1000 calls in %.2f s", $elapsed);
	is($keys, 200, 'independent keys: all 200 keys were called');
	is($wrong, 0, 'independent keys: every key allowed exactly 3 of 5');
	fact('count_checks.001', 1000);
	fact('miscounted.001', $wrong + abs($keys - 200));
}

# 3. Sliding log, 64 clients: with the clock pinned every call happens in
# the same microsecond; with Redis TIME many still share one.
$node->safe_psql('postgres',
	'CREATE UNLOGGED TABLE lhits (run text, allowed bool, remaining bigint)');
for my $run ('pinned', 'redis_time')
{
	my $set =
	  $run eq 'pinned' ? "SET ratelimit.test_clock_ms = 1700000000000;\n" : '';
	my ($rc, $out, $err, $elapsed) = pgbench(64, 20,
		$set
		  . "INSERT INTO lhits SELECT '$run', allowed, remaining "
		  . "FROM rl_allow('log_$run', 'sliding_log', 500, '1 hour');\n");
	pgbench_clean("sliding_log $run", $rc, $out, $err, 1280);
	my ($allowed, $distinct) = split /\|/, $node->safe_psql(
		'postgres', qq{
		SELECT count(*) FILTER (WHERE allowed),
		       count(DISTINCT remaining) FILTER (WHERE allowed)
		FROM lhits WHERE run = '$run'});
	my $key = redis_key("log_$run", 'sliding_log', 500, 3_600_000);
	my $zcard = $redis->cli('ZCARD', $key);
	note sprintf("sliding_log %s: 1280 calls in %.2f s, %d allowed, ZCARD %d",
		$run, $elapsed, $allowed, $zcard);
	is($allowed, 500, "sliding_log $run: exactly the limit allowed");
	is($zcard, $allowed, "sliding_log $run: ZCARD equals allowed");
	is($distinct, $allowed, "sliding_log $run: remaining values unique");
	fact('count_checks.001', 1280);
	fact('miscounted.001',
		abs($allowed - 500) + abs($zcard - $allowed) + abs($distinct - $allowed));
	if ($run eq 'pinned')
	{
		my $score = 1700000000000 * 1000;
		is($redis->cli('ZCOUNT', $key, $score, $score),
			500, 'sliding_log pinned: all 500 entries share one microsecond');
	}
}

# 4. One key under every algorithm: separate state, no WRONGTYPE.
{
	my $res = $node->safe_psql(
		'postgres', q{
		SELECT string_agg(a || ':' || r.remaining, ',' ORDER BY a, g)
		FROM unnest(ARRAY['fixed_window', 'sliding_log', 'sliding_counter',
		                  'token_bucket', 'leaky_bucket', 'gcra']) a,
		     generate_series(1, 2) g,
		     LATERAL rl_allow('shared', a, 5, '1 hour', 1 + 0 * g) r});
	is( $res,
		'fixed_window:4,fixed_window:3,gcra:4,gcra:3,leaky_bucket:4,'
		  . 'leaky_bucket:3,sliding_counter:4,sliding_counter:3,'
		  . 'sliding_log:4,sliding_log:3,token_bucket:4,token_bucket:3',
		'same key, six algorithms: six independent limiters');
	my @keys = sort split /\n/,
	  $redis->cli('--scan', '--pattern', "rl:{$dboid:shared}:*");
	is(scalar(@keys), 6, 'same key, six algorithms: six Redis keys');
}

# 5. The statement trigger under 16 sessions, in both forms: statements
# of 1 to 5 rows for one author (about 1440 rows), limit 1000 rows a day.  A refused
# statement is caught in a PL/pgSQL block (a rolled-back subtransaction)
# and charges nothing; an admitted one charges exactly its rows.
$node->safe_psql(
	'postgres', q{
	CREATE TABLE tx_pair (author int, n int);
	CREATE TRIGGER c BEFORE INSERT ON tx_pair FOR EACH ROW
		EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '1000', '1 day');
	CREATE TRIGGER s AFTER INSERT ON tx_pair FOR EACH STATEMENT
		EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '1000', '1 day');
	CREATE TABLE tx_transition (author int, n int);
	CREATE TRIGGER s AFTER INSERT ON tx_transition REFERENCING NEW TABLE AS rl_new
		FOR EACH STATEMENT
		EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '1000', '1 day');
	CREATE UNLOGGED TABLE shits (form text, rows int, admitted bool);
	CREATE FUNCTION try_rows(tbl text, n int) RETURNS bool LANGUAGE plpgsql AS $$
	BEGIN
		EXECUTE format('INSERT INTO %I SELECT 1, g FROM generate_series(1, %s) g', tbl, n);
		RETURN true;
	EXCEPTION WHEN SQLSTATE 'PT429' THEN
		RETURN false;
	END $$;
});
for my $form ('pair', 'transition')
{
	my ($rc, $out, $err, $elapsed) = pgbench(16, 30,
		"\\set n random(1, 5)\n"
		  . "INSERT INTO shits SELECT '$form', :n, try_rows('tx_$form', :n);\n");
	pgbench_clean("statement trigger, $form", $rc, $out, $err, 480);
	my ($rows, $admitted, $refused) = split /\|/, $node->safe_psql(
		'postgres', qq{
		SELECT (SELECT count(*) FROM tx_$form),
		       coalesce(sum(rows) FILTER (WHERE admitted), 0),
		       count(*) FILTER (WHERE NOT admitted)
		FROM shits WHERE form = '$form'});
	my $charged = $redis->fw_used(
		redis_key("public.tx_$form:author='1'", 'fixed_window', 1000, 86_400_000));
	note sprintf("statement trigger %s: 480 statements in %.2f s: %d rows written, "
		  . "%d refused statements, Redis charged %s", $form, $elapsed, $rows, $refused, $charged);
	ok($rows >= 996 && $rows <= 1000,
		"statement trigger $form: at most the limit written, and close to it ($rows)");
	is($admitted, $rows, "statement trigger $form: the admitted statements wrote every row");
	is($charged, $rows, "statement trigger $form: Redis charged exactly the rows written");
	fact('count_checks.001', 480);
	fact('miscounted.001',
		($rows > 1000 ? $rows - 1000 : 0) + abs($admitted - $rows) + abs(($charged // 0) - $rows));
}

# Every key the limiter wrote carries a TTL.
my $ks = $redis->info('keyspace', 'db0');
my ($nkeys, $nexp) = $ks =~ /keys=(\d+),expires=(\d+)/;
note "keyspace: $ks";
is($nexp, $nkeys, 'every Redis key has an expiry');

$node->stop;
done_testing();
