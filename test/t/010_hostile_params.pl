# test/t/010_hostile_params.pl
#
# Hostile parameters: what one caller's limit, window and cost can do to
# another caller of the same limiter, and to the shared Redis.
#   1. A property test over random pairs (earlier calls, later call) on
#      one key, every algorithm: earlier calls with any accepted
#      parameters, the extremes included (limit 1e9, 366 days, cost =
#      limit; sliding_log at its cap), or with the later call's limit and
#      window and any cost, then a call with its own (limit, window,
#      cost).  A limiter is its key, algorithm, limit and window, so an
#      earlier call of other parameters is another limiter: when no
#      earlier call had the later call's, the later call finds a fresh
#      limiter (admitted, remaining limit - cost).  Whatever came before,
#      that call never waits longer than one window of its own plus what
#      its own cost needs (cost x window / limit), +1 ms of rounding; its
#      reset_after_ms is bounded the same way (two windows for
#      sliding_counter, whose state weighs until the end of the next
#      window by definition); and once it has waited retry_after_ms
#      (pinned clock) it is admitted.  The seed is printed; RL_SEED=<n>
#      replays a run.  Then the reproduction of issue 11 by hand (no
#      longer a lock-out: the later call is a limiter of its own), and
#      state in the format 0.1.0 wrote read conservatively.
#   2. The worst accepted single calls of every algorithm (limits and
#      costs at their maximum, 366-day windows), also a layered call of
#      three such rules, timed by Redis SLOWLOG and reported as figures;
#      asserted is what bounds the work: a sliding_log call adds at most
#      one sorted-set member whatever its cost, and the key stays small.
#   3. Per-call Redis time (INFO commandstats) of each algorithm on a hot
#      key, as figures.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use POSIX qw(ceil);
use Time::HiRes qw(time);

use RLRedis qw(rl_node rl_session rl_run fact);

my $seed = $ENV{RL_SEED} // (time() * 1000 ^ $$) % 2**31;
srand($seed);
note "seed $seed (RL_SEED=$seed replays this run)";
diag "010_hostile_params: seed $seed" if $ENV{RL_SEED};

my $redis = RLRedis->new(name => 'r010');
# Long timeouts: any policy answer here would be a failure, not a fault.
my $node = rl_node('c010', $redis, qq{
ratelimit.command_timeout = 5000
ratelimit.connect_timeout = 5000
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

my @ALGOS =
  qw(fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra);
my $US_DAY = 86_400_000_000;
my $MAX_WINDOW = 366 * $US_DAY;
my $MAX_LIMIT = 1_000_000_000;
my $MAX_LOG_LIMIT = 100_000;

sub rnd { int(rand($_[0])) }
sub pick { $_[ rnd(scalar @_) ] }
sub chance { rand() < $_[0] }

sub gcd
{
	my ($a, $b) = @_;
	($a, $b) = ($b, $a % $b) while $b;
	return $a;
}

sub cap { return $_[0] eq 'sliding_log' ? $MAX_LOG_LIMIT : $MAX_LIMIT }

# The exactness rule of the buckets and GCRA (src/rl_args.c).
sub fine_ok
{
	my ($algo, $limit, $wus) = @_;
	return 1 unless $algo =~ /^(token_bucket|leaky_bucket|gcra)$/;
	return $limit * ($wus / gcd($limit, $wus)) < 2**53;
}

# Random accepted parameters, often at the extremes.
sub gen_params
{
	my ($algo) = @_;
	for (1 .. 100)
	{
		my $r = rand();
		my $limit =
		    $r < 0.25 ? cap($algo)
		  : $r < 0.45 ? 1 + rnd(10)
		  : $r < 0.60 ? 1 + rnd(1000)
		  : $r < 0.75 ? 1 + rnd(cap($algo))
		  : $r < 0.85 ? pick(60, 100, 1000, 3600, 86400)
		  :             pick(1, 2, 3, 7, 999_999_937 % cap($algo));
		$r = rand();
		my $w =
		    $r < 0.25 ? $MAX_WINDOW
		  : $r < 0.35 ? 1000
		  : $r < 0.55 ? (1 + rnd(120)) * 1_000_000
		  : $r < 0.70 ? (1 + rnd(48)) * 3_600_000_000
		  : $r < 0.85 ? (1 + rnd(366)) * $US_DAY
		  :             1000 + rnd(10_000_000);
		next unless fine_ok($algo, $limit, $w);
		$r = rand();
		my $cost =
		    $r < 0.35 ? $limit
		  : $r < 0.65 ? 1
		  :             1 + rnd($limit);
		return ($limit, $w, $cost);
	}
	return (10, 60_000_000, 1);
}

# The pinned clock as the setting takes it: ms with microseconds.
sub clock_text
{
	my ($us) = @_;
	return int($us / 1000) . '.' . sprintf('%03d', $us % 1000);
}

# ---------------------------------------------------------------------
# 1. Random (earlier, later) pairs.

my $NPAIRS = $ENV{RL_HOSTILE_PAIRS} // 1200;
my @pairs;
my $t = 1_800_000_000_000_000 + rnd(1_000_000) * 1_000_000;
for my $i (1 .. $NPAIRS)
{
	my $algo = $ALGOS[ ($i - 1) % @ALGOS ];
	my $key = "hostile:$seed:$i";
	my @calls;
	my $now = $t + rnd(1_000_000_000);
	# The later call's parameters first: about half the earlier calls use
	# its limit and window (its limiter), with a cost of their own.
	my ($l, $w, $c) = gen_params($algo);
	$c = 1 + rnd(3) if $c > 3 && chance(0.5);
	$c = $l if $c > $l;
	for (1 .. 1 + rnd(3))
	{
		my ($el, $ew, $ec) = gen_params($algo);
		($el, $ew, $ec) = ($l, $w, pick($l, 1, 1 + rnd($l))) if chance(0.5);
		push @calls, [ $now, $el, $ew, $ec ];
		$now += pick(0, 0, rnd(1000), rnd(1_000_000), rnd(100_000_000));
	}
	$now += pick(0, 0, rnd(1000), rnd(1_000_000), rnd($w));
	push @pairs, { id => $i, algo => $algo, key => $key, earlier => \@calls,
		later => [ $now, $l, $w, $c ],
		shared => scalar(grep { $_->[1] == $l && $_->[2] == $w } @calls) };
}

# One function runs the earlier calls, the later call and, if it was
# denied, the same call again once its retry_after_ms has passed.
$node->safe_psql('postgres', q{
CREATE TABLE steps (id int, n int, clock text, algo text, k text,
	lim bigint, win text, cost bigint);
CREATE TABLE answers (id int, allowed bool, remaining bigint, retry bigint,
	reset bigint, again bool);
CREATE FUNCTION hostile_run(lo int, hi int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	s record;
	r record;
	done int := 0;
	again bool;
BEGIN
	FOR s IN SELECT * FROM steps WHERE id BETWEEN lo AND hi
			 ORDER BY steps.id, steps.n = 0, steps.n LOOP
		PERFORM set_config('ratelimit.test_clock_ms', s.clock, false);
		SELECT * INTO r FROM rl_allow(s.k, s.algo, s.lim, s.win::interval, s.cost);
		IF s.n = 0 THEN
			-- the later call
			again := NULL;
			IF NOT r.allowed AND (r.retry_after_ms < 0
					OR s.clock::numeric + r.retry_after_ms >= 9e12) THEN
				again := false;		-- past any clock the setting takes
			ELSIF NOT r.allowed THEN
				PERFORM set_config('ratelimit.test_clock_ms',
					(s.clock::numeric + r.retry_after_ms)::text, false);
				SELECT allowed INTO again
				FROM rl_allow(s.k, s.algo, s.lim, s.win::interval, s.cost);
			END IF;
			INSERT INTO answers VALUES (s.id, r.allowed, r.remaining,
				r.retry_after_ms, r.reset_after_ms, again);
			done := done + 1;
		END IF;
	END LOOP;
	RETURN done;
END
$$;
});
{
	my @rows;
	for my $p (@pairs)
	{
		my $n = 0;
		for my $c (@{ $p->{earlier} }, $p->{later})
		{
			$n++;
			my $step = $c == $p->{later} ? 0 : $n;
			push @rows, "($p->{id}, $step, '" . clock_text($c->[0])
			  . "', '$p->{algo}', '$p->{key}', $c->[1], '$c->[2] microseconds', $c->[3])";
		}
	}
	while (my @chunk = splice(@rows, 0, 2000))
	{
		$node->safe_psql('postgres', 'INSERT INTO steps VALUES ' . join(",\n", @chunk));
	}
}
my $t0 = time;
for (my $lo = 1; $lo <= $NPAIRS; $lo += 300)
{
	$node->safe_psql('postgres', "SELECT hostile_run($lo, " . ($lo + 299) . ')');
}
my $elapsed = time - $t0;

my %ans;
for my $line (split /\n/, $node->safe_psql('postgres',
		"SELECT id, allowed, remaining, retry, reset, coalesce(again::text, '-') FROM answers"))
{
	my ($id, @f) = split /\|/, $line;
	$ans{$id} = \@f;
}

my (%bad, @examples, $denied, $worst, $nshared);
$worst = { retry => 0, reset => 0 };
for my $p (@pairs)
{
	my $a = $ans{ $p->{id} };
	my $algo = $p->{algo};
	my (undef, $l, $w, $c) = @{ $p->{later} };
	# A failure of one kind: counted, and the first two shown.
	my $what = sub {
		my ($why, $detail) = @_;
		push @examples, "$algo: $why $detail: pair $p->{id}: earlier "
		  . join(' ', map { "(at $_->[0]: $_->[1], $_->[2] us, $_->[3])" } @{ $p->{earlier} })
		  . "; later (at $p->{later}[0]: $l, $w us, $c) answered ("
		  . join(',', @{ $a // [] }) . ')'
		  if ++$bad{"$algo: $why"} <= 2;
	};
	if (!$a)
	{
		$what->('no answer');
		next;
	}
	my ($allowed, $rem, $retry, $reset, $again) = @$a;
	my $w_ms = ceil($w / 1000);
	my $need_ms = ceil($c * $w / $l / 1000);
	my $retry_max = $w_ms + $need_ms + 1;
	my $reset_max = $algo eq 'sliding_counter' ? 2 * $w_ms + 1 : $w_ms + $need_ms + 1;
	$what->('retry_after_ms beyond window + cost x window / limit', "($retry > $retry_max)")
	  if $retry > $retry_max || $retry < 0;
	$what->('reset_after_ms beyond its bound', "($reset > $reset_max)")
	  if $reset > $reset_max || $reset < 0;
	$what->('remaining out of 0..limit', '') if $rem < 0 || $rem > $l;
	$nshared++ if $p->{shared};
	$what->('not a fresh limiter after calls of other parameters only', '')
	  if !$p->{shared} && ($allowed ne 't' || $rem != $l - $c);
	if ($allowed eq 'f')
	{
		$denied++;
		$what->('still denied after waiting retry_after_ms', '') if $again ne 'true';
	}
	$worst->{retry} = $retry / $w_ms if $retry / $w_ms > $worst->{retry};
}
note sprintf('%d pairs in %.1f s (%d with earlier calls of the later call\'s limiter), '
	  . '%d later calls denied', $NPAIRS, $elapsed, $nshared // 0, $denied // 0);
diag $_ for @examples;
is(scalar(keys %bad), 0,
	"$NPAIRS random (earlier, later) pairs over six algorithms: the later call waits at most "
	  . "its own window plus its cost's share, and is admitted after that wait; calls of "
	  . "other parameters left it a fresh limiter (seed $seed)");
note "$_: $bad{$_}" for sort keys %bad;
fact('figure.010', sprintf('hostile parameters: seed %d, %d (earlier, later) pairs, %d denied; '
	  . 'longest wait %.3g windows of the later call; %d failures of the bounds',
	$seed, $NPAIRS, $denied // 0, $worst->{retry}, eval { my $n = 0; $n += $_ for values %bad; $n }));

# The reproduction from issue 11, by hand: a year-long lock-out in 0.1.0,
# where a call read the state under its own parameters.  Now the (10,
# 1 minute) call is a limiter of its own, and the year-long one keeps its
# count.
for my $algo (@ALGOS)
{
	my $lim = cap($algo);
	my $key = "lockout:$seed";
	my $out = $node->safe_psql('postgres', qq{
		SET ratelimit.test_clock_ms = 1800000000000;
		SELECT count(*) FROM rl_allow('$key', '$algo', $lim, '366 days', $lim);
		SET ratelimit.test_clock_ms = 1800000000001;
		SELECT allowed, remaining, retry_after_ms FROM rl_allow('$key', '$algo', 10, '1 minute');
		SELECT remaining FROM rl_peek('$key', '$algo', $lim, '366 days');
	});
	my (undef, $later, $year) = split /\n/, $out;
	is($later, 't|9|0',
		"$algo: after rl_allow(k, '$algo', $lim, '366 days', $lim) a (10, 1 minute) "
		  . "call is admitted with 9 left: a limiter of its own");
	is($year, 0, "$algo: and the year-long limiter still has nothing left");
}

# State in the format 0.1.0 wrote is read conservatively: a sliding_log
# of one member per unit counts its units, all leaving with the newest; a
# GCRA TAT without its write time is cut to one window as of the first
# read, and rewritten so, so that it drains.  (0.4.0 keys name the
# parameters, so the scripts meet such state only under a 0.4.0 key: the
# keys 0.1.0 wrote are not read, and expire.)
{
	my $old = "rl:{$dboid:legacy_old}:gcra";
	$redis->cmd('SET', $old, '1831622400000000+0/5', 'PX', 3_600_000);
	my $fresh = $node->safe_psql('postgres', q{
		SET ratelimit.test_clock_ms = 1800000000000;
		SELECT rl_allow('legacy_old', 'gcra', 10, '1 minute');
	});
	is($fresh, '(t,9,0,6000)', 'a key as 0.1.0 named it is not read: a fresh limiter');
	my $lkey = "rl:{$dboid:legacy}:sliding_log:10:10000ms";
	my $T0 = 1_800_000_000_000_000;
	$redis->cmd('ZADD', $lkey, map { ($T0, "$T0-$_") } 0 .. 2);
	$redis->cmd('ZADD', $lkey, map { ($T0 + 1_000_000, ($T0 + 1_000_000) . "-$_") } 0 .. 3);
	$redis->cmd('PEXPIRE', $lkey, 60_000);
	my $out = $node->safe_psql('postgres', q{
		SET ratelimit.test_clock_ms = 1800000002000;
		SELECT rl_allow('legacy', 'sliding_log', 10, '10 s', 3);
		SELECT rl_allow('legacy', 'sliding_log', 10, '10 s', 1);
		SET ratelimit.test_clock_ms = 1800000011000;
		SELECT rl_allow('legacy', 'sliding_log', 10, '10 s', 7);
	});
	is($out, "(t,0,0,10000)\n(f,0,9000,10000)\n(t,0,0,10000)",
		'a 0.1.0 sliding_log: its 7 units count, and leave with the newest');
	my $gkey = "rl:{$dboid:legacy}:gcra:10:60000ms";
	$redis->cmd('SET', $gkey, ($T0 + 366 * $US_DAY) . '+0/5', 'PX', 3_600_000);
	$out = $node->safe_psql('postgres', q{
		SET ratelimit.test_clock_ms = 1800000000000;
		SELECT rl_allow('legacy', 'gcra', 10, '1 minute');
		SET ratelimit.test_clock_ms = 1800000006000;
		SELECT rl_allow('legacy', 'gcra', 10, '1 minute');
	});
	is($out, "(f,0,6000,60000)\n(t,0,0,60000)",
		'a 0.1.0 GCRA state a year ahead: cut to one window, then drains');
}

# ---------------------------------------------------------------------
# 2. The worst single calls, timed by SLOWLOG; the bounded work asserted.

sub slowlog_worst
{
	# {key => worst duration in us} of the script calls logged (FCALL,
	# EVALSHA, EVAL: the key is the fourth argument of each).
	my %worst;
	my $log = $redis->cmd('SLOWLOG', 'GET', 10000);
	for my $e (@$log)
	{
		my ($dur, $args) = ($e->[2], $e->[3]);
		next unless ref $args && lc($args->[0]) =~ /^(eval|fcall)/;
		my $k = $args->[3] // '';
		$worst{$k} = $dur if !defined $worst{$k} || $dur > $worst{$k};
	}
	return \%worst;
}

$redis->cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
$redis->cmd('CONFIG', 'SET', 'slowlog-max-len', 10000);
my %single;
my @worst_figs;
for my $algo (@ALGOS)
{
	my $lim = cap($algo);
	my $key = "worst:$algo";
	my $rkey = "rl:{$dboid:$key}:$algo:$lim:31622400000ms";    # 366 days
	$redis->cmd('SLOWLOG', 'RESET');
	# Admitted at the maximum, then denied at the maximum; for the log
	# also a long log (2000 calls) that a maximal denial must search and
	# an admitted call must prune.
	my $sql = qq{
		SELECT count(*) FROM rl_allow('$key', '$algo', $lim, '366 days', $lim);
		SELECT count(*) FROM rl_allow('$key', '$algo', $lim, '366 days', $lim);
	};
	$node->safe_psql('postgres', $sql);
	my $mem = $redis->cmd('MEMORY', 'USAGE', $rkey) // 0;
	my $w = slowlog_worst()->{$rkey} // -1;
	$single{$algo} = $w;
	push @worst_figs, "$algo ${w} us ($mem B)";
	if ($algo eq 'sliding_log')
	{
		is($redis->cmd('ZCARD', $rkey), 1,
			"sliding_log: one call of cost $lim stores one member");
		ok($mem < 1024, "sliding_log: the key of that call takes $mem bytes (under 1 kB)");
	}
}
fact('figure.010', 'worst single call (limit and cost at the maximum, 366 days; '
	  . 'SLOWLOG, key size): ' . join(', ', @worst_figs));

# sliding_log: many calls of random cost on one key, in three windows (so
# three limiters); every call adds at most one member to its limiter's
# log, and a maximal denial on a long log is one search.
{
	my $key = "worst:log2";
	my %rkey = ('10 seconds' => 10_000, '1 second' => 1000, '366 days' => 31_622_400_000);
	$_ = "rl:{$dboid:$key}:sliding_log:100000:${_}ms" for values %rkey;
	my ($grew, $calls, $admitted) = (0, 400, 0);
	my %prev;
	my $ms = rl_session($node);
	$redis->cmd('SLOWLOG', 'RESET');
	for my $i (1 .. $calls)
	{
		# A pinned clock, 50 ms per call (and no deny cache): most calls
		# reach Redis and many are admitted.
		my $c = pick(1, 1, 2, 1 + rnd(300), 1 + rnd(30000), 100_000);
		my $w = pick('10 seconds', '10 seconds', '1 second', '366 days');
		my ($out) = rl_run($ms, 'SET ratelimit.test_clock_ms = '
			  . (1_800_000_000_000 + 50 * $i) . ";\n"
			  . "SELECT allowed FROM rl_allow('$key', 'sliding_log', 100000, '$w', $c)");
		$admitted++ if $out eq 't';
		my $n = $redis->cmd('ZCARD', $rkey{$w});
		$grew++ if $n > ($prev{$w} // 0) + 1;
		$prev{$w} = $n;
	}
	my $sw = slowlog_worst();
	my ($mix) = sort { $b <=> $a } map { $sw->{$_} // -1 } values %rkey;
	note 'SLOWLOG length ' . $redis->cmd('SLOWLOG', 'LEN');
	# A long log of cost-1 calls, then the call that must search it.
	$redis->cmd('SLOWLOG', 'RESET');
	rl_run($ms, 'RESET ratelimit.test_clock_ms');
	rl_run($ms, "SELECT count(*) FILTER (WHERE (rl_allow('$key:long', 'sliding_log', "
		  . "100000, '366 days')).allowed) FROM generate_series(1, 5000)");
	rl_run($ms, "SELECT count(*) FROM rl_allow('$key:long', 'sliding_log', 100000, "
		  . "'366 days', 99999)");
	$ms->quit;
	ok($admitted > 0 && $grew == 0,
		"sliding_log: $calls calls of random cost ($admitted admitted), none added more "
		  . "than one member");
	my $lw = slowlog_worst();
	my $lkey = "rl:{$dboid:$key:long}:sliding_log:100000:31622400000ms";
	my $long = $lw->{$lkey} // -1;
	my $mem = $redis->cmd('MEMORY', 'USAGE', $lkey) // 0;
	fact('figure.010', "sliding_log: worst of $calls calls of random cost $mix us; "
		  . "worst call on a log of 5000 members (searched by a denial) $long us, key $mem B");
}

# A layered call of three maximal sliding_log rules (845 ms in 0.1.0).
{
	# The first call loads the script; time the second, on fresh keys.
	my $layered = q{
		SELECT count(*) FROM rl_allow_layered('worst:layered:KEY',
			ARRAY[('sliding_log', 100000, '366 days'), ('sliding_log', 100000, '30 seconds'),
				  ('sliding_log', 100000, '1 hour')]::rl_rule[], 100000)};
	$node->safe_psql('postgres', $layered =~ s/KEY/warm/r);
	$redis->cmd('SLOWLOG', 'RESET');
	$node->safe_psql('postgres', ($layered =~ s/KEY/1/r) . ';' . ($layered =~ s/KEY/1/r));
	my $lw = slowlog_worst();
	my ($w) = sort { $b <=> $a } values %$lw;
	fact('figure.010', 'layered call of three sliding_log rules at limit = cost = 100000, '
		  . 'admitted then denied: worst ' . ($w // -1) . ' us (SLOWLOG)');
}
$redis->cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 10000);

# Every key written here has a TTL.
{
	my $ks = $redis->info('keyspace', 'db0') // '';
	my ($keys, $exp) = $ks =~ /keys=(\d+),expires=(\d+)/;
	is($exp, $keys, "every key written has a TTL ($ks)");
}

# ---------------------------------------------------------------------
# 3. Per-call Redis time on a hot key: 2000 calls from one DO loop, real
# clock; 'admit' is 100000 per minute (every call admitted), 'deny' is 10
# per hour (all but ten denied).

{
	my @figs;
	for my $algo (@ALGOS)
	{
		my @per;
		for my $case ([ 'admit', 100_000, '1 minute' ], [ 'deny', 10, '1 hour' ])
		{
			my ($name, $lim, $win) = @$case;
			$redis->cmd('CONFIG', 'RESETSTAT');
			$node->safe_psql('postgres', qq{
				DO \$\$ BEGIN
				FOR i IN 1..2000 LOOP
					PERFORM rl_allow('hot:$name', '$algo', $lim, '$win');
				END LOOP;
				END \$\$});
			my $st = $redis->cmdstat('fcall');
			$st = $redis->cmdstat('evalsha') unless $st->{calls};
			push @per, "$name $st->{usec_per_call}";
		}
		push @figs, "$algo " . join(' / ', @per);
	}
	fact('figure.010', 'hot key, 2000 calls, Redis usec_per_call (INFO commandstats): '
		  . join('; ', @figs));
	note "hot key usec_per_call: " . join('; ', @figs);
}

$node->stop;
done_testing();
