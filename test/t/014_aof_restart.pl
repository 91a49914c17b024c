# test/t/014_aof_restart.pl
#
# Redis with AOF persistence (appendonly yes, appendfsync always)
# restarted mid-run, by SHUTDOWN and by kill -9.  Every algorithm keeps
# its state in one Redis key, so the question is whether that key comes
# back as it was:
#   1. quiet: each of the six algorithms' keys (hash or sorted set) has
#      the same fields and the same absolute expiry time after each
#      restart, and the next call continues from it;
#   2. under load from four pgbench sessions, restarted twice: every call
#      answered by Redis is in what Redis holds afterwards, and calls
#      answered by the policy while Redis was away are not, except at
#      most one per session and restart that was in flight when Redis
#      went (its outcome unknown: it may have been applied, once).
# The limiter clock is pinned (ratelimit.test_clock_ms), so no state
# refills with time and what a key holds is exactly the units admitted
# into it: limit minus rl_peek's remaining.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_load rl_wait_for proc_alive fact fault_mark
  fault_done);

my @ALGOS =
  qw(fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra);
my $LIMIT = 100000;
my $CLIENTS = 4;

my $redis = RLRedis->new(
	name => 'r014',
	args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]);
my $node = rl_node('c014', $redis, qq{
ratelimit.test_clock_ms = 1767225600000
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

is($redis->cli('CONFIG', 'GET', 'appendfsync'), "appendfsync\nalways",
	'Redis runs with appendfsync always');

# The key of the limiter ($key, $algo, $LIMIT, '1 day'): the parameters
# are part of a limiter's name.
sub redis_key { "rl:{$dboid:$_[0]}:$_[1]:$LIMIT:86400000ms" }

# A key's state as one string: its type (a hash, a sorted set for
# sliding_log, a string for gcra), every field or member with its value
# or score, and its absolute expiry time in ms.
sub snapshot
{
	my ($key) = @_;
	my $type = $redis->cmd('TYPE', $key);
	my $data = '';
	if ($type eq 'hash')
	{
		my %h = @{ $redis->cmd('HGETALL', $key) };
		$data = join(',', map { "$_=$h{$_}" } sort keys %h);
	}
	elsif ($type eq 'string')
	{
		$data = $redis->cmd('GET', $key);
	}
	elsif ($type eq 'zset')
	{
		$data = join(',', @{ $redis->cmd('ZRANGE', $key, 0, -1, 'WITHSCORES') });
	}
	my $at = $redis->cmd('PEXPIRETIME', $key);
	return "$type [$data] expires at $at";
}

# Units Redis holds for a limiter: limit minus what rl_peek leaves.
sub held
{
	my ($s, $key, $algo) = @_;
	my ($rem) = rl_run($s, "SELECT remaining FROM rl_peek('$key', '$algo', $LIMIT, '1 day')");
	return $LIMIT - $rem;
}

# Restarts Redis on its port and data directory, by SHUTDOWN or kill -9;
# true once it has loaded its AOF and answers.
sub restart
{
	my ($how) = @_;
	$redis->cmd_close;
	if ($how eq 'SHUTDOWN')
	{
		my $pid = $redis->pid;
		$redis->cli('SHUTDOWN');
		rl_wait_for(sub { !proc_alive($pid) }, 10) // return 0;
	}
	else
	{
		$redis->kill9;
	}
	$redis->start or return 0;
	return defined rl_wait_for(
		sub { ($redis->info('persistence', 'loading') // '') eq '0' }, 10);
}

# 1. Quiet restarts: state and expiry of every algorithm's key survive.
my $s = rl_session($node);
my %used;
for my $algo (@ALGOS)
{
	for my $cost (1, 1, 1, 1, 1, 3)
	{
		rl_run($s, "SELECT rl_allow('q', '$algo', $LIMIT, '1 day', $cost)");
	}
	$used{$algo} = 8;
	is(held($s, 'q', $algo), 8, "$algo: 8 units held before any restart");
}
for my $how ('SHUTDOWN', 'kill -9')
{
	my $mark = fault_mark();
	my %before = map { $_ => snapshot(redis_key('q', $_)) } @ALGOS;
	note "$_: $before{$_}" for @ALGOS;
	ok(restart($how), "$how: Redis restarted from its AOF");
	for my $algo (@ALGOS)
	{
		my $after = snapshot(redis_key('q', $algo));
		is($after, $before{$algo},
			"$how, $algo: the key's state and expiry time are as before");
	}
	for my $algo (@ALGOS)
	{
		is(held($s, 'q', $algo), $used{$algo},
			"$how, $algo: rl_peek sees the $used{$algo} units held before");
		my ($out) = rl_run($s,
			"SELECT allowed, remaining FROM rl_allow('q', '$algo', $LIMIT, '1 day')");
		$used{$algo}++;
		is($out, 't|' . ($LIMIT - $used{$algo}),
			"$how, $algo: the next call continues from it, answered by Redis");
	}
	my ($st) = rl_run($s, 'SELECT fail_open FROM rl_status()');
	is($st, 0, "$how: no call was answered by the policy");
	fault_done("Redis with AOF restarted by $how: every algorithm's state and expiry kept",
		$mark);
}
fact('count_checks.014', scalar(@ALGOS) * 9);

# 2. Under load: four pgbench clients call the six limiters until the
# test stops them.  Redis is shut down once it has answered 300 of their
# calls, and killed once it has answered 300 again after that restart;
# each time it is restarted 0.5 s later.  The load is stopped once Redis
# has answered 300 calls after the second restart: it spans both
# restarts however fast or slow the machine (a load of fixed length, with
# restarts at fixed times, could end before Redis answered again after
# the last one).
my $mark = fault_mark();
$node->safe_psql('postgres', q{
CREATE TABLE algos (id int PRIMARY KEY, name text);
CREATE TABLE calls (algo text, allowed bool, known bool,
	at timestamptz DEFAULT clock_timestamp());
} . join('', map { "INSERT INTO algos VALUES ($_, '$ALGOS[$_ - 1]');\n" } 1 .. 6));
my $load = rl_load($node, $CLIENTS, qq{
\\set a random(1, 6)
INSERT INTO calls (algo, allowed, known)
SELECT a.name, r.allowed, r.remaining IS NOT NULL
FROM algos a, LATERAL rl_allow('load', a.name, $LIMIT, '1 day') r WHERE a.id = :a;
});
# Calls answered by Redis since a time (seconds since the epoch).
my $known_since = sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM calls WHERE known AND at > to_timestamp($_[0])");
};
my %restarted;
my $since = 0;
for my $how ('SHUTDOWN', 'kill -9')
{
	rl_wait_for(sub { $known_since->($since) >= 300 }, 60);
	if ($how eq 'SHUTDOWN')
	{
		my $pid = $redis->pid;
		$redis->cmd_close;
		$redis->cli('SHUTDOWN');
		rl_wait_for(sub { !proc_alive($pid) }, 10);
	}
	else
	{
		$redis->kill9;
	}
	usleep(500_000);
	ok($redis->start, "under load: Redis restarted after $how");
	$restarted{$how} = $since = time;
}
rl_wait_for(sub { $known_since->($since) >= 300 }, 60);
my ($clean, $processed, $lerr) = $load->();
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM calls');
note "pgbench: $processed calls from $clean clients, $rows rows";
fact('calls.014', $processed);
fact('clients.014', $CLIENTS);
fact('pgbench_errors.014', $CLIENTS - $clean);
is($clean, $CLIENTS, "under load: the $CLIENTS pgbench clients ran clean until stopped")
  or diag($lerr);
is($rows, $processed,
	'under load: every call answered, none failed (policy answers while Redis was away)');

my ($policy_total, $known_total, $unknown_applied, $wrong) = (0, 0, 0, 0);
my $bound = $CLIENTS * 2;
for my $algo (@ALGOS)
{
	my ($known, $policy) = split /\|/, $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE known AND allowed), count(*) FILTER (WHERE NOT known) "
		  . "FROM calls WHERE algo = '$algo'");
	my $held = held($s, 'load', $algo);
	my $extra = $held - $known;
	note "$algo: $known calls answered by Redis, $policy by the policy; Redis holds $held";
	ok($extra >= 0, "under load, $algo: every call answered by Redis is held ($held >= $known)");
	ok($extra <= $bound,
		"under load, $algo: policy answers not counted, but for at most one in flight "
		  . "per session and restart ($extra of $policy)");
	$policy_total += $policy;
	$known_total += $known;
	$unknown_applied += $extra if $extra > 0;
	$wrong += $extra < 0 ? -$extra : ($extra > $bound ? $extra - $bound : 0);
}
ok($policy_total > 0, "under load: the restarts were felt ($policy_total policy answers)");
my ($after) = $node->safe_psql('postgres',
	'SELECT count(*) FROM calls WHERE known AND at > to_timestamp('
	  . $restarted{'kill -9'} . ')');
ok($after > 0, "under load: calls answered by Redis again after the last restart ($after)");
fact('count_checks.014', $known_total);
fact('miscounted.014', $wrong);
fact('figure.014', "AOF (appendfsync always) restarted by SHUTDOWN and kill -9 under "
	  . "$CLIENTS sessions: $known_total calls answered by Redis all held, $policy_total "
	  . "answered by the policy, $unknown_applied of those applied (in flight when Redis went)");
fault_done('Redis with AOF restarted by SHUTDOWN and kill -9 under load: counts exact', $mark);

$s->quit;
$node->stop;
done_testing();
