# test/t/022_scripts.pl
#
# The scripts' state encoding and reloads (issue 16).
#
# 1. State written by 0.2.0 is read as 0.2.0 read it.  0.3.0 keeps every
#    algorithm but the sliding log in one binary string set with SET ... PX
#    (0.2.0: a hash written by HSET + PEXPIRE, GCRA a text), and writes the
#    sliding log's members in binary (0.2.0: "<cum>:<cost>" text).  For
#    each algorithm, a limiter runs a series of calls (pinned clock, some
#    admitted, some denied); halfway its state is copied into a second key
#    in 0.2.0's form, with the same TTL; the rest of the series then runs
#    on both keys, and every answer must be identical to the millisecond.
#    The copy is in the new form after its next admitted call.  (0.2.0's
#    own keys have no parameters in their names, so since 0.4.0 no call
#    reads them; the copy is written under the name of the 0.4.0 limiter
#    called on it, so that the scripts' reading of the old forms runs.)
# 2. A restart without persistence forgets the scripts and the state: the
#    first call after it gets "Function not found" (Redis 7.0 and later:
#    one FUNCTION LOAD, then the call again) or NOSCRIPT (sent once more
#    as EVAL), is answered by Redis (no policy answer), and the counts
#    start afresh exactly: limit L, 2L calls, L admitted, every algorithm.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node rl_session rl_run rl_status_of);

my @ALGOS = qw(fixed_window sliding_log sliding_counter token_bucket
  leaky_bucket gcra);

my $redis = RLRedis->new(name => 'r022');
my $node = rl_node('c022', $redis, qq{
ratelimit.deny_cache = off
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
my $s = rl_session($node);

# The Redis key of the limiter (key, algo, 5, '10 seconds') that call() runs.
sub rkey { "rl:{$dboid:$_[0]}:$_[1]:5:10000ms" }

# One call at a pinned clock (ms): "allowed|remaining|retry|reset".
sub call
{
	my ($key, $algo, $t, $cost) = @_;
	my ($out, $err) = rl_run($s,
		"SET ratelimit.test_clock_ms = $t; "
		  . "SELECT allowed, remaining, retry_after_ms, reset_after_ms "
		  . "FROM rl_allow('$key', '$algo', 5, '10 seconds', $cost)");
	die "rl_allow: $err" if $err =~ /ERROR/;
	return $out;
}

# Writes into key $to, in 0.2.0's form, the state 0.3.0 keeps under $from.
sub copy_as_020
{
	my ($algo, $from, $to) = @_;
	my $pttl = $redis->cmd('PTTL', $from);
	$redis->cmd('DEL', $to);
	if ($algo eq 'sliding_log')
	{
		my $v = $redis->cmd('ZRANGE', $from, 0, -1, 'WITHSCORES');
		for (my $i = 0; $i < @$v; $i += 2)
		{
			my ($cum, $cost) = unpack('d> d>', $v->[$i]);
			$redis->cmd('ZADD', $to, $v->[ $i + 1 ],
				sprintf('%016.0f:%.0f', $cum, $cost));
		}
	}
	else
	{
		my @n = $redis->limiter_state($from);
		die "no state under $from" unless @n;
		if ($algo eq 'gcra')
		{
			$redis->cmd('SET', $to, "$n[0]+$n[1]/$n[2]\@$n[3]");
		}
		else
		{
			my %fields = (
				fixed_window => [qw(w n)],
				sliding_counter => [qw(w cur prev)],
				token_bucket => [qw(credit ts unit)],
				leaky_bucket => [qw(level ts unit)]);
			my @f = @{ $fields{$algo} };
			$redis->cmd('HSET', $to, map { ($f[$_], $n[$_]) } 0 .. $#f);
		}
	}
	$redis->cmd('PEXPIRE', $to, $pttl);
}

# 1. 0.2.0 state.
my $t0 = 1767225600000;
# (ms after t0, cost): a burst, denials, refills, a step back in time.
my @first = ([ 0, 1 ], [ 10, 2 ], [ 20, 1 ], [ 1500, 1 ], [ 1510, 1 ]);
my @rest = ([ 1520, 1 ], [ 1530, 3 ], [ 2100, 1 ], [ 2050, 1 ],
	[ 4000, 2 ], [ 4001, 5 ], [ 9999, 1 ], [ 10001, 1 ], [ 12000, 0 ],
	[ 15000, 4 ], [ 21000, 1 ]);
for my $algo (@ALGOS)
{
	call("new_$algo", $algo, $t0 + $_->[0], $_->[1]) for @first;
	copy_as_020($algo, rkey("new_$algo", $algo), rkey("old_$algo", $algo));
	my $type = $redis->cmd('TYPE', rkey("old_$algo", $algo));
	my (@a, @b);
	for my $c (@rest)
	{
		push @a, call("new_$algo", $algo, $t0 + $c->[0], $c->[1]);
		push @b, call("old_$algo", $algo, $t0 + $c->[0], $c->[1]);
	}
	is(join(' ', @b), join(' ', @a),
		"$algo: state in 0.2.0's form ($type) gives the same answers");
	my $admitted = grep { /^t/ } @b;
	ok($admitted > 0 && (grep { /^f/ } @b) > 0,
		"$algo: the series admits and denies ($admitted admitted)");
	if ($algo eq 'sliding_log')
	{
		my $m = $redis->cmd('ZRANGE', rkey("old_$algo", $algo), -1, -1);
		is(length($m->[0]), 32, "$algo: the newest member is in the new form");
	}
	else
	{
		ok(scalar($redis->limiter_state(rkey("old_$algo", $algo))),
			"$algo: the copy is in the new form after an admitted call");
	}
	cmp_ok($redis->cmd('PTTL', rkey("old_$algo", $algo)), '>', 0,
		"$algo: the converted key has a TTL");
}

# 2. A restart without persistence.
rl_run($s, 'SET ratelimit.test_clock_ms = 0');
for my $algo (@ALGOS)
{
	rl_run($s, "SELECT rl_allow('warm', '$algo', 5, '1 hour')");
}
$redis->kill9;
ok($redis->start, 'Redis restarted without persistence');
# A new session, so that no link broken by the kill is in the way.
$s->quit;
$s = rl_session($node);
my $before = rl_status_of($s);
my @counts;
for my $algo (@ALGOS)
{
	my ($n) = rl_run($s,
		"SELECT count(*) FILTER (WHERE (r).allowed) || '/' || count(*) FROM "
		  . "(SELECT rl_allow('after', '$algo', 5, '1 hour') AS r "
		  . "FROM generate_series(1, 10)) c");
	push @counts, "$algo $n";
}
is(join(', ', @counts), join(', ', map { "$_ 5/10" } @ALGOS),
	'after the restart: exactly 5 of 10 admitted, every algorithm');
my $after = rl_status_of($s);
is($after->{fail_open} - $before->{fail_open}, 0,
	'after the restart: no policy answer');
if ($redis->cmdstat('fcall')->{calls} > 0)
{
	# Redis 7.0 and later: one FUNCTION LOAD brings every script back.
	is($after->{script_loads} - $before->{script_loads}, 1,
		'after the restart: the library loaded once (FUNCTION LOAD after "Function not found")');
	is($redis->cmdstat('function|load')->{calls}, 1, 'Redis saw one FUNCTION LOAD');
	is($redis->cmdstat('fcall')->{failed_calls}, 1, 'one FCALL found no function');
	is($redis->cmdstat('evalsha')->{calls} + $redis->cmdstat('eval')->{calls}, 0,
		'no EVALSHA or EVAL on Redis 7');
}
else
{
	is($after->{script_loads} - $before->{script_loads}, scalar(@ALGOS),
		'after the restart: each script sent once more (EVAL after NOSCRIPT)');
}

$s->quit;
done_testing();
