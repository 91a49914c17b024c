# test/t/023_local_diff.pl
#
# The local engine against the Lua scripts: the same random traffic
# (key, algorithm, limit, window, cost, pinned time, with clock steps
# back) goes through ratelimit.engine = redis (a real redis-server) and
# ratelimit.engine = local in one session, call by call, and every row
# must be the same: rl_allow and rl_peek for all six algorithms,
# rl_allow_many, and rl_allow_layered / rl_peek_layered with mixed rules;
# and calls by name while their policies change (what each store carries
# over).
# A seeded generator (RL_SEED=<n> replays a run).
#
# Redis expires keys in real time while the pinned clock stands still, so
# after every step each key Redis holds is made persistent (the state a
# script reads after its TTL means "fresh" anyway, which the local engine
# reproduces by keeping it).  A key that expired before that (a TTL of a
# millisecond or two) is reset on the local engine as well, and counted.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node rl_session rl_run fact);

my $seed = $ENV{RL_SEED} // (time() * 1000 ^ $$) % 2**31;
srand($seed);
note "seed $seed (RL_SEED=$seed replays this run)";

my $redis = RLRedis->new(name => 'r023');
my $node = rl_node('c023', $redis, qq{
ratelimit.command_timeout = 5000
ratelimit.connect_timeout = 5000
ratelimit.failure_mode = error
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

my @ALGOS =
  qw(fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra);
my @LIMITS = (1, 2, 3, 5, 7, 10, 17, 100, 128);
my @WINDOWS = (1000, 20_000, 999_983, 1_000_000, 7_250_000, 60_000_000,
	86_400_000_000);

sub rnd { int(rand($_[0])) }
sub pick { $_[ rnd(scalar @_) ] }

sub clock_text
{
	my ($us) = @_;
	return int($us / 1000) . '.' . sprintf('%03d', $us % 1000);
}

sub window_key
{
	my ($w) = @_;
	return $w % 1000 == 0 ? ($w / 1000) . 'ms' : "${w}us";
}

# The Redis key of the limiter (key, algo, limit, window in us, burst), and
# the rl_reset of that limiter: a limiter's parameters are part of its name.
sub limiter_key
{
	my ($key, $algo, $L, $W, $B) = @_;
	return "rl:{$dboid:$key}:$algo:$L:" . window_key($W) . (defined $B && $B != $L ? ":b$B" : '');
}

sub reset_sql
{
	my ($key, $algo, $L, $W, $B) = @_;
	return "SELECT rl_reset('$key', '$algo', $L, '$W microseconds'"
	  . (defined $B ? ", burst => $B" : '') . ')';
}

my $s = rl_session($node);
rl_run($s, 'SET ratelimit.failure_mode = error');

# Runs one statement on both engines at the same pinned time: the two
# outputs.
sub both
{
	my ($now, $sql) = @_;
	my ($out, $err) = rl_run($s,
		"SET ratelimit.test_clock_ms = '" . clock_text($now) . "';\n"
		  . "SET ratelimit.engine = redis;\n$sql;\n"
		  . "\\echo ====\n"
		  . "SET ratelimit.engine = local;\n$sql;\n");
	die "error: $err" if $err =~ /ERROR/;
	my ($r, $l) = split /^====\n?/m, $out, 2;
	$r //= '';
	$l //= '';
	chomp($r, $l);
	return ($r, $l);
}

# Keeps every Redis key; the keys among want that are gone are returned.
my $PERSIST = q{
local gone = {}
for i, k in ipairs(ARGV) do
  if redis.call('EXISTS', k) == 0 then gone[#gone + 1] = k end
end
for _, k in ipairs(redis.call('KEYS', 'rl:*')) do redis.call('PERSIST', k) end
return gone
};

my ($steps, $bad, $expired) = (0, 0, 0);
my %seen = (allowed => 0, denied => 0, back => 0);

sub compare
{
	my ($what, $r, $l) = @_;
	$steps++;
	$seen{allowed} += () = $r =~ /^(?:[^|\n]*\|)?t\|/mg;
	$seen{denied} += () = $r =~ /^(?:[^|\n]*\|)?f\|/mg;
	return if $r eq $l;
	$bad++;
	diag "$what:\n  redis: $r\n  local: $l" if $bad <= 5;
}

# Keys written (their reset on the local engine if Redis lost them).
sub settle
{
	my (%written) = @_;
	my $gone = $redis->cmd('EVAL', $PERSIST, 0, keys %written);
	for my $k (@$gone)
	{
		$expired++;
		rl_run($s, "SET ratelimit.engine = local;\n$written{$k};");
	}
}

# 1. rl_allow / rl_peek on random limiters, each with its own clock.
my @limiters;
for my $i (1 .. 36)
{
	my $algo = $ALGOS[ ($i - 1) % 6 ];
	my $L = pick(@LIMITS);
	my $W = pick(@WINDOWS);
	push @limiters, [ $algo, $L, $W, "d:$seed:$i" ];
}
# Full sliding logs: many calls per window, clock steps back, the oldest
# members pruned as Redis does (section 4 has the large ones).
push @limiters, [ 'sliding_log', 128, 1_000_000, "d:$seed:ring1", 500 ];
push @limiters, [ 'sliding_log', 100, 20_000, "d:$seed:ring2", 300 ];
for my $lim (@limiters)
{
	my ($algo, $L, $W, $key, $n) = @$lim;
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000 + rnd(1000);
	my $step = int($W / $L) || 1;
	my $rkey = limiter_key($key, $algo, $L, $W);
	for my $i (1 .. ($n // 40))
	{
		my $r = rand();
		if    ($r < 0.15) { }
		elsif ($r < 0.70) { $now += rnd(2 * $step) }
		elsif ($r < 0.82) { $now += rnd(1000) }
		elsif ($r < 0.90) { $now += $W + rnd($W) }
		else { $now -= rnd(int($W / 2)) + 1; $seen{back}++ }
		my $c = rand() < 0.55 ? 1 : rand() < 0.4 ? 0 : 1 + rnd($L);
		my $call = rand() < 0.1
		  ? "rl_peek('$key', '$algo', $L, '$W microseconds')"
		  : "rl_allow('$key', '$algo', $L, '$W microseconds', $c)";
		my ($rr, $ll) = both($now,
			"SELECT allowed, remaining, retry_after_ms, reset_after_ms FROM $call");
		compare("$call at " . clock_text($now), $rr, $ll);
		settle($rkey => reset_sql($key, $algo, $L, $W))
		  if $rr =~ /^t/ && $c > 0 && $call =~ /^rl_allow/;
	}
}
is($bad, 0, "rl_allow/rl_peek: $steps steps, every row equal on both engines");

# 2. rl_allow_many: one limiter, 30 keys (some repeated), costs per key.
my $before = $steps;
my $bad_before = $bad;
for my $round (1 .. 12)
{
	my $algo = pick(@ALGOS);
	my $L = pick(@LIMITS);
	# Not the 1 ms window: a key of a batch can expire in Redis (real
	# time) between two of the batch's commands, before settle() can keep
	# it; the single calls above cover that window.
	my $W = pick(grep { $_ > 1000 } @WINDOWS);
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000;
	my @keys = map { "m:$seed:$round:" . rnd(12) } 1 .. 30;
	my $keys_sql = "ARRAY['" . join("','", @keys) . "']";
	for my $i (1 .. 6)
	{
		$now += rnd(int($W / 2) + 1);
		my @costs = map { rand() < 0.6 ? 1 : rnd($L + 1) } @keys;
		my $costs_sql = 'ARRAY[' . join(',', @costs) . ']::bigint[]';
		my ($rr, $ll) = both($now,
			"SELECT key, allowed, remaining, retry_after_ms, reset_after_ms "
			  . "FROM rl_allow_many($keys_sql, '$algo', $L, '$W microseconds', $costs_sql)");
		compare("rl_allow_many $algo $L/$W at " . clock_text($now), $rr, $ll);
		my %w = map { (limiter_key($_, $algo, $L, $W) => reset_sql($_, $algo, $L, $W)) } @keys;
		settle(%w);
	}
}
is($bad - $bad_before, 0,
	'rl_allow_many: ' . ($steps - $before) . ' batches, every row equal');

# 3. Layered rules: 1 to 4 rules of mixed algorithms on one key.
$before = $steps;
$bad_before = $bad;
for my $k (1 .. 16)
{
	my $key = "l:$seed:$k";
	my %rules;
	for (1 .. 1 + rnd(4))
	{
		my $algo = pick(@ALGOS);
		my $W = pick(@WINDOWS);
		$rules{"$algo:$W"} = [ $algo, pick(@LIMITS), $W ];
	}
	my @rules = values %rules;
	my $rules_sql = 'ARRAY['
	  . join(',', map { "('$_->[0]', $_->[1], '$_->[2] microseconds')" } @rules)
	  . ']::rl_rule[]';
	my $minw = (sort { $a <=> $b } map { $_->[2] } @rules)[0];
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000;
	my $minl = (sort { $a <=> $b } map { $_->[1] } @rules)[0];
	for my $i (1 .. 25)
	{
		my $r = rand();
		if    ($r < 0.6) { $now += rnd(int($minw / 2) + 1) }
		elsif ($r < 0.9) { $now += rnd(1000) }
		else { $now -= rnd(int($minw / 2)) + 1; $seen{back}++ }
		my $c = rand() < 0.7 ? 1 : rnd($minl + 1);
		my $call = rand() < 0.15
		  ? "rl_peek_layered('$key', $rules_sql)"
		  : "rl_allow_layered('$key', $rules_sql, $c)";
		my ($rr, $ll) = both($now,
			"SELECT allowed, remaining, retry_after_ms, reset_after_ms FROM $call");
		compare("$call at " . clock_text($now), $rr, $ll);
		my %w = map {
			(limiter_key($key, $_->[0], $_->[1], $_->[2]) =>
				"SELECT rl_reset_layered('$key', ARRAY[('$_->[0]', $_->[1], '$_->[2] microseconds')]::rl_rule[])")
		} @rules;
		settle(%w) if $rr =~ /^t/ && $c > 0 && $call =~ /^rl_allow/;
	}
}
is($bad - $bad_before, 0,
	'layered: ' . ($steps - $before) . ' calls, every row equal');

# 4. Bursts: the three gradual algorithms with a capacity apart from the
# rate, above and below the limit, alone and as rl_burst_rule layers.
$before = $steps;
$bad_before = $bad;
for my $k (1 .. 18)
{
	my $algo = (qw(token_bucket leaky_bucket gcra))[ ($k - 1) % 3 ];
	my $L = pick(@LIMITS);
	my $W = pick(@WINDOWS);
	my $B = 1 + rnd(3 * $L);
	my $key = "b:$seed:$k";
	my $rkey = limiter_key($key, $algo, $L, $W, $B);
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000;
	my $step = int($W / $L) || 1;
	my $layered = $k > 12;
	my $rule = "ARRAY[('$algo', $L, '$W microseconds', $B)]::rl_burst_rule[]";
	for my $i (1 .. 30)
	{
		my $r = rand();
		if    ($r < 0.6) { $now += rnd(2 * $step) }
		elsif ($r < 0.9) { $now += rnd(1000) }
		else { $now -= rnd(int($W / 2)) + 1; $seen{back}++ }
		my $c = rand() < 0.6 ? 1 : rnd($B + 1);
		my $call = $layered
		  ? "rl_allow_layered('$key', $rule, $c)"
		  : "rl_allow('$key', '$algo', $L, '$W microseconds', $c, burst => $B)";
		my ($rr, $ll) = both($now,
			"SELECT allowed, remaining, retry_after_ms, reset_after_ms FROM $call");
		compare("$call at " . clock_text($now), $rr, $ll);
		my $reset = $layered
		  ? "SELECT rl_reset_layered('$key', $rule)"
		  : reset_sql($key, $algo, $L, $W, $B);
		settle($rkey => $reset) if $rr =~ /^t/ && $c > 0;
	}
}
is($bad - $bad_before, 0,
	'bursts: ' . ($steps - $before) . ' calls, every row equal');

# 5. Large sliding logs, limits 1000 and 5000 (the local engine chains
# their members over many blocks of its pool): enough calls to fill them
# and more, members leaving in bulk (more than the 64 a call drops),
# clock steps back, and large costs whose wait is searched through the
# log.  The calls go 250 to a round trip; a window of a minute keeps
# every Redis TTL far from running out meanwhile.
$before = $steps;
$bad_before = $bad;
for my $big ([ 1000, 3000 ], [ 5000, 9000 ])
{
	my ($L, $n) = @$big;
	my $W = 60_000_000;
	my $key = "big:$seed:$L";
	my $rkey = limiter_key($key, 'sliding_log', $L, $W);
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000;
	my $step = int($W / $L);
	my @calls;
	for my $i (1 .. $n)
	{
		my $r = rand();
		if    ($r < 0.75) { $now += rnd(2 * $step) }
		elsif ($r < 0.90) { }
		elsif ($r < 0.97) { $now += rnd(int($W / 3)) }
		else { $now -= rnd(int($W / 4)) + 1; $seen{back}++ }
		my $c = rand() < 0.9 ? 1 : 1 + rnd(int($L / 10));
		my $call = rand() < 0.05
		  ? "rl_peek('$key', 'sliding_log', $L, '$W microseconds')"
		  : "rl_allow('$key', 'sliding_log', $L, '$W microseconds', $c)";
		push @calls,
		  "SET ratelimit.test_clock_ms = '" . clock_text($now) . "';\n"
		  . "SELECT allowed, remaining, retry_after_ms, reset_after_ms FROM $call;\n";
	}
	while (@calls)
	{
		my $sql = join('', splice(@calls, 0, 250));
		my ($out, $err) = rl_run($s,
			"SET ratelimit.engine = redis;\n$sql\\echo ====\n"
			  . "SET ratelimit.engine = local;\n$sql");
		die "error: $err" if $err =~ /ERROR/;
		my ($r, $l) = split /^====\n?/m, $out, 2;
		my @r = split /\n/, $r // '';
		my @l = split /\n/, $l // '';
		die 'chunk: ' . scalar(@r) . ' rows on Redis, ' . scalar(@l) . ' local'
		  unless @r == @l;
		compare("sliding_log $L, row $_ of a chunk", $r[$_], $l[$_]) for 0 .. $#r;
		settle($rkey => reset_sql($key, 'sliding_log', $L, $W));
	}
	my ($members) = $redis->cmd('ZCARD', $rkey);
	note "sliding_log $L: $members members in Redis at the end";
}
is($bad - $bad_before, 0,
	'large sliding logs: ' . ($steps - $before) . ' calls, every row equal');

# 6. Named policies (0.5.0): calls by name while the policy's limit,
# window and burst change under them, so that every call after a change
# converts a state written under other parameters (carry): Lua's
# conversions against the C ones, clock steps back included.
$before = $steps;
$bad_before = $bad;
for my $k (1 .. 24)
{
	my $algo = $ALGOS[ ($k - 1) % 6 ];
	my $bucket = $algo =~ /bucket|gcra/;
	my $pol = "d023.$k";
	my $key = "p:$seed:$k";
	my $rkey = "rl:{$dboid:$key}:policy:$pol/$algo";
	# Not the 1 ms window: a TTL of a millisecond can run out in Redis
	# (real time) before settle() keeps the key.
	my @windows = grep { $_ > 1000 } @WINDOWS;
	my ($L, $W) = (pick(@LIMITS), pick(@windows));
	my $B = $bucket && rand() < 0.5 ? 1 + rnd(3 * $L) : undef;
	my $burst_sql = sub { defined $_[0] ? $_[0] : 'NULL' };
	rl_run($s, "DELETE FROM rl_policies WHERE name = '$pol';
"
		  . "INSERT INTO rl_policies (name, algo, \"limit\", \"window\", burst) "
		  . "VALUES ('$pol', '$algo', $L, '$W microseconds', "
		  . $burst_sql->($B) . ")");
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000;
	for my $i (1 .. 30)
	{
		if ($i > 1 && rand() < 0.3)
		{
			my $r = rand();
			if    ($r < 0.4) { $L = pick(@LIMITS) }
			elsif ($r < 0.7) { $W = pick(@windows) }
			elsif ($bucket)  { $B = rand() < 0.2 ? undef : 1 + rnd(3 * $L) }
			else { $L = pick(@LIMITS); $W = pick(@windows) }
			rl_run($s, "UPDATE rl_policies SET \"limit\" = $L, "
				  . "\"window\" = '$W microseconds', burst = "
				  . $burst_sql->($B) . " WHERE name = '$pol'");
		}
		my $cap = defined $B ? $B : $L;
		my $step = int($W / $L) || 1;
		my $r = rand();
		if    ($r < 0.15) { }
		elsif ($r < 0.70) { $now += rnd(2 * $step) }
		elsif ($r < 0.82) { $now += rnd(1000) }
		elsif ($r < 0.90) { $now += $W + rnd($W) }
		else { $now -= rnd(int($W / 2)) + 1; $seen{back}++ }
		my $c = rand() < 0.55 ? 1 : rand() < 0.4 ? 0 : 1 + rnd($cap);
		my $call = rand() < 0.1
		  ? "rl_peek('$key', '$pol')"
		  : "rl_allow('$key', '$pol', $c)";
		my ($rr, $ll) = both($now,
			"SELECT allowed, remaining, retry_after_ms, reset_after_ms FROM $call");
		compare("$call ($algo $L/$W/" . ($B // '-') . ') at ' . clock_text($now),
			$rr, $ll);
		settle($rkey => "SELECT rl_reset('$key', '$pol')");
	}
	rl_run($s, "DELETE FROM rl_policies WHERE name = '$pol'");
}
is($bad - $bad_before, 0,
	'named policies changed under their calls: ' . ($steps - $before)
	  . ' calls, every row equal');

note "$steps comparisons ($seen{allowed} allowed, $seen{denied} denied rows, "
  . "$seen{back} clock steps back), $expired keys Redis expired before they "
  . 'could be kept';
ok($seen{allowed} > 100 && $seen{denied} > 100,
	'the traffic both admits and denies');
fact('figure.023', "$steps comparisons Lua vs C, $bad different");

$s->quit;
$node->stop;
done_testing();
