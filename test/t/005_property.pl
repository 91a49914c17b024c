# test/t/005_property.pl
#
# Property tests over random input.  A seeded generator (the seed is
# printed; RL_SEED=<n> replays a run) makes a few thousand calls of
# rl_allow, rl_peek, rl_allow_many and rl_allow_layered with keys of
# random bytes and lengths, every algorithm and some invalid names, and
# limits, windows, costs and pinned clocks at and beyond every documented
# edge.  It checks that
#   - the server never crashes: one backend answers them all;
#   - an input is refused (SQLSTATE 22004 or 22023) exactly when the
#     README's input rules reject it, and a refused input makes no Redis
#     round trip while an accepted one makes exactly one script run per
#     limiter checked;
#   - every answer obeys the contract (0 <= remaining <= limit; allowed
#     means retry_after_ms = 0; denied means retry_after_ms >= 1 and
#     reset_after_ms >= 0; cost 0 is allowed).
# Then a model check replays random schedules of pinned times and costs
# on a few (algorithm, limit, window) triples against an exact integer
# model of each algorithm's script, and compares every answer and the
# state left in Redis; token_bucket, leaky_bucket and gcra are checked
# also with random bursts (capacities above and below the limit).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run fact);

my $seed = $ENV{RL_SEED} // (time() * 1000 ^ $$) % 2**31;
srand($seed);
note "seed $seed (RL_SEED=$seed replays this run)";
diag "005_property: seed $seed" if $ENV{RL_SEED};

my $redis = RLRedis->new(name => 'r005');
# Long timeouts: any policy answer here would be a failure, not a fault.
my $node = rl_node('c005', $redis, qq{
ratelimit.command_timeout = 5000
ratelimit.connect_timeout = 5000
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

my @ALGOS =
  qw(fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra);
my %IS_ALGO = map { $_ => 1 } @ALGOS;
my @BAD_ALGOS = ('FIXED', 'fixed', 'gcra ', ' gcra', 'Gcra', '',
	'token-bucket', 'sliding_log2', "fixed_window\n", "\x{1F600}", 'leaky',
	'GCRA', 'sliding counter', 'x');
my $US_DAY = 86_400_000_000;
my $MAX_WINDOW = 366 * $US_DAY;
my $INT64_MIN = '-9223372036854775808';
my $INT64_MAX = '9223372036854775807';

sub rnd { int(rand($_[0])) }
sub pick { $_[ rnd(scalar @_) ] }
sub chance { rand() < $_[0] }

sub gcd
{
	my ($a, $b) = @_;
	($a, $b) = ($b, $a % $b) while $b;
	return $a;
}

# ---------------------------------------------------------------------
# Generators.  Each returns what goes into the SQL and what the README's
# rules say about it.

# A key as UTF-8 bytes: CR/LF, RESP fragments, format directives,
# braces, colons, escapes, multibyte text; 0 to 1100 bytes.
my @TOKENS = (('a' .. 'z'), (0 .. 9), ':', '{', '}', '%', '%7D', '%25',
	"\r", "\n", "\r\n", "\t", ' ', "'", '"', '\\', '$', '*',
	"*3\r\n\$3\r\nDEL\r\n", '%s', '%n', "\x01", "\x7f", "\x{e9}", "\x{fc}",
	"\x{20ac}", "\x{1F600}", "\x{4e2d}", '}:fixed_window', '{5:');
my @TOKEN_BYTES = map { my $t = $_; utf8::encode($t); $t } @TOKENS;

sub gen_key
{
	my $r = rand();
	my $len =
	    $r < 0.04 ? 0
	  : $r < 0.55 ? 1 + rnd(16)
	  : $r < 0.75 ? 17 + rnd(184)
	  : $r < 0.82 ? pick(1023, 1024, 1024, 1025, 1026)
	  : $r < 0.90 ? 1000 + rnd(101)
	  :             200 + rnd(825);
	my $key = '';
	while (length($key) < $len - 24)
	{
		$key .= pick(@TOKEN_BYTES);
	}
	while (length($key) < $len)
	{
		my $t = pick(@TOKEN_BYTES);
		$t = 'x' if length($key) + length($t) > $len;
		$key .= $t;
	}
	return $key;
}

sub key_ok { my $l = length($_[0]); return $l >= 1 && $l <= 1024 }

sub gen_algo
{
	return chance(0.88) ? pick(@ALGOS) : pick(@BAD_ALGOS);
}

sub gen_limit
{
	my $r = rand();
	return
	    $r < 0.25 ? 1 + rnd(10)
	  : $r < 0.45 ? 1 + rnd(100)
	  : $r < 0.55 ? 1 + rnd(10000)
	  : $r < 0.60 ? 1
	  : $r < 0.63 ? 0
	  : $r < 0.65 ? -1
	  : $r < 0.66 ? -1 - rnd(1_000_000)
	  : $r < 0.67 ? $INT64_MIN
	  : $r < 0.68 ? $INT64_MAX
	  : $r < 0.71 ? 1_000_000_000
	  : $r < 0.73 ? 1_000_000_001
	  : $r < 0.76 ? 100_000
	  : $r < 0.79 ? 100_001
	  : $r < 0.82 ? 999_999_937                     # a prime
	  : $r < 0.85 ? 1 + rnd(1_000_000_000)
	  :             1 + rnd(1000);
}

sub limit_ok
{
	my ($algo, $limit) = @_;
	return 0 if $limit < 1;
	return $limit <= ($algo eq 'sliding_log' ? 100_000 : 1_000_000_000);
}

# A window as (interval text, microseconds by the README's rule: a month
# is 30 days, a day 24 hours).
sub gen_window
{
	my ($m, $d, $us) = (0, 0, 0);
	my $r = rand();
	if    ($r < 0.03) { $us = rnd(1000) }                       # sub-ms, 0
	elsif ($r < 0.08) { $us = 1000 }                            # 1 ms
	elsif ($r < 0.18) { $us = 1000 + rnd(1_000_000) }           # ms, odd us
	elsif ($r < 0.48) { $us = (1 + rnd(120)) * 1_000_000 }      # seconds
	elsif ($r < 0.60) { $us = (1 + rnd(48)) * 3_600_000_000 }   # hours
	elsif ($r < 0.67) { $d = 1 + rnd(366) }                     # days
	elsif ($r < 0.74) { $m = 1 + rnd(12) }                      # months
	elsif ($r < 0.77) { $d = 366 }
	elsif ($r < 0.79) { $d = 367 }
	elsif ($r < 0.80) { ($d, $us) = (366, 1) }
	elsif ($r < 0.81) { $m = 13 }
	elsif ($r < 0.84) { $m = 12 * (1 + rnd(2)) }                # 1 or 2 years
	elsif ($r < 0.88) { ($d, $us) = (1, -rnd(25) * 3_600_000_000) }
	elsif ($r < 0.90) { $us = -(1 + rnd(10_000_000)) }
	elsif ($r < 0.91) { $m = 12 * 178_000_000 }
	elsif ($r < 0.95) { ($m, $d, $us) = (rnd(3), rnd(40), rnd(86_400_000_000)) }
	else              { $us = 1000 * (1 + rnd(100)) + rnd(1000) }
	my @parts;
	push @parts, "$m mons" if $m;
	push @parts, "$d days" if $d;
	push @parts, "$us microseconds" if $us || !@parts;
	my $total = $m * 30 * $US_DAY + $d * $US_DAY + $us;
	return (join(' ', @parts), $total);
}

sub window_ok { return $_[0] >= 1000 && $_[0] <= $MAX_WINDOW }

# The exactness rule of the buckets and GCRA.
sub fine_ok
{
	my ($algo, $limit, $wus) = @_;
	return 1 unless $algo =~ /^(token_bucket|leaky_bucket|gcra)$/;
	my $step = $wus / gcd($limit, $wus);
	return $limit * $step < 2**53;
}

sub gen_cost
{
	my ($limit) = @_;
	my $lim = $limit =~ /^-?\d+$/ && abs($limit) < 1e12 ? $limit : 10;
	my $r = rand();
	return
	    $r < 0.10 ? 0
	  : $r < 0.13 ? -1
	  : $r < 0.14 ? -1 - rnd(1000)
	  : $r < 0.15 ? $INT64_MIN
	  : $r < 0.16 ? $INT64_MAX
	  : $r < 0.55 ? 1
	  : $r < 0.75 ? 1 + rnd($lim > 10 ? 10 : ($lim > 1 ? $lim : 1))
	  : $r < 0.84 ? $lim
	  : $r < 0.91 ? $lim + 1
	  :             1 + rnd($lim > 1 ? $lim : 1);
}

sub cost_ok { my ($c, $limit) = @_; return $c >= 0 && $c <= $limit }

# SQL literals.
sub q_text
{
	my ($s) = @_;
	utf8::encode($s) if utf8::is_utf8($s);
	return "convert_from('\\x" . unpack('H*', $s) . "'::bytea, 'UTF8')";
}
sub q_int { return "'$_[0]'::bigint" }
sub q_win { return "'$_[0]'::interval" }

# The pinned clock: ms since the epoch with microseconds, as the setting
# takes it; "0" for Redis TIME.
sub clock_text
{
	my ($us) = @_;
	return '0' unless $us;
	return int($us / 1000) . '.' . sprintf('%03d', $us % 1000);
}

# ---------------------------------------------------------------------
# 1. Random calls.

my $NCASES = $ENV{RL_PROPERTY_CASES} // 10000;
my @cases;
my @pool;        # limiters called before: [key, algo, limit, wtext, wus]
my $clock = 1_700_000_000_000_000 + rnd(100_000_000) * 1_000_000;

sub next_clock
{
	my $r = rand();
	if    ($r < 0.20) { }                                          # same us
	elsif ($r < 0.65) { $clock += rnd(1000) }
	elsif ($r < 0.82) { $clock += rnd(10_000_000) }
	elsif ($r < 0.86) { $clock += rnd(48) * 3_600_000_000 }
	elsif ($r < 0.88) { $clock += (1 + rnd(3)) * 30 * $US_DAY }
	elsif ($r < 0.95) { $clock -= rnd(10_000_000) }                 # steps back
	else              { $clock -= rnd(24) * 3_600_000_000 }
	return $clock;
}

# One limiter call's arguments: mostly fresh, sometimes a limiter called
# before (same parameters), or its key with new parameters (a plan
# change, which starts a limiter of its own).
sub gen_limiter
{
	if (@pool && chance(0.4))
	{
		my ($key, $algo, $limit, $wtext, $wus) = @{ pick(@pool) };
		($limit, $wtext, $wus) = (gen_limit(), gen_window()) if chance(0.25);
		return ($key, $algo, $limit, $wtext, $wus);
	}
	return (gen_key(), gen_algo(), gen_limit(), gen_window());
}

for my $id (1 .. $NCASES)
{
	my $now = next_clock();
	my $redis_time = chance(0.02);
	my $r = rand();
	my %c = (id => $id, clock => $redis_time ? 0 : $now);
	my $null = chance(0.03);

	if ($r < 0.70)
	{
		# rl_allow or rl_peek
		my $peek = $r >= 0.58;
		my ($key, $algo, $limit, $wtext, $wus) = gen_limiter();
		($key, $algo) = (gen_key() . 'T', pick(@ALGOS)) if $redis_time;
		my $cost = $peek ? 0 : gen_cost($limit);
		my @args = (q_text($key), q_text($algo), q_int($limit), q_win($wtext));
		push @args, q_int($cost) unless $peek;
		my $nullarg = $null ? rnd(scalar @args) : -1;
		$args[$nullarg] = 'NULL' if $nullarg >= 0;
		my $valid = key_ok($key) && $IS_ALGO{$algo} && limit_ok($algo, $limit)
		  && window_ok($wus) && fine_ok($algo, $limit, $wus)
		  && cost_ok($cost, $limit);
		%c = (%c, kind => $peek ? 'peek' : 'allow',
			rel => ($peek ? 'rl_peek(' : 'rl_allow(') . join(', ', @args) . ')',
			lims => [ [ $key, $algo, $limit, $wus ] ], costs => [$cost],
			rows => 1, runs => 1,
			expect => $nullarg >= 0 ? ['22004'] : $valid ? 'ok' : ['22023']);
	}
	elsif ($r < 0.76)
	{
		# rl_peek of a limiter called before, explicitly (cost 0)
		my ($key, $algo, $limit, $wtext, $wus) = gen_limiter();
		my $valid = key_ok($key) && $IS_ALGO{$algo} && limit_ok($algo, $limit)
		  && window_ok($wus) && fine_ok($algo, $limit, $wus);
		%c = (%c, kind => 'allow0',
			rel => 'rl_allow(' . join(', ', q_text($key), q_text($algo),
				q_int($limit), q_win($wtext), q_int(0)) . ')',
			lims => [ [ $key, $algo, $limit, $wus ] ], costs => [0],
			rows => 1, runs => 1, expect => $valid ? 'ok' : ['22023']);
	}
	elsif ($r < 0.86)
	{
		# rl_allow_many, with one cost or one cost per key
		my (undef, $algo, $limit, $wtext, $wus) = gen_limiter();
		my $n = pick(0, 1, 1, 2, 3, 4, 6, 8);
		my (@keys, @costs);
		for (1 .. $n)
		{
			my $key = @keys && chance(0.2) ? pick(@keys) : gen_key();
			$key = pick(@pool)->[0] if @pool && chance(0.2);
			push @keys, $key;
		}
		my $per_key = chance(0.4);
		my $cost = gen_cost($limit);
		@costs = $per_key ? map { gen_cost($limit) } @keys : ($cost) x $n;
		my $ncosts = scalar @costs;
		$ncosts += pick(-1, 1) if $per_key && chance(0.1) && $n > 0;
		my $costs_sql = 'ARRAY[' . join(', ', map { q_int($_) }
			  (@costs, ($cost) x 3)[ 0 .. $ncosts - 1 ]) . ']::bigint[]';
		my $keys_sql = 'ARRAY[' . join(', ', map { q_text($_) } @keys) . ']::text[]';
		my $valid = $IS_ALGO{$algo} && limit_ok($algo, $limit)
		  && window_ok($wus) && fine_ok($algo, $limit, $wus)
		  && !grep({ !key_ok($_) } @keys)
		  && !grep({ !cost_ok($_, $limit) } @costs)
		  && $ncosts == $n;
		my $keynull = $null && $n > 0;
		$keys_sql =~ s/^ARRAY\[convert_from\('[^']*'::bytea, 'UTF8'\)/ARRAY[NULL/
		  if $keynull;
		%c = (%c, kind => 'many',
			rel => "rl_allow_many($keys_sql, " . q_text($algo) . ', '
			  . q_int($limit) . ', ' . q_win($wtext) . ', '
			  . ($per_key ? $costs_sql : q_int($cost)) . ')',
			lims => [ map { [ $_, $algo, $limit, $wus ] } @keys ],
			# One script call for the batch's keys (up to 64 a call).
			costs => [@costs], rows => $n, runs => ($n > 0 ? 1 : 0),
			expect => $valid && !$keynull ? 'ok'
			: $keynull ? [ $valid ? '22004' : ('22004', '22023') ] : ['22023']);
	}
	else
	{
		# rl_allow_layered / rl_peek_layered: up to four rules, sometimes
		# none, seventeen, or two sharing an algorithm and window
		my $key = chance(0.3) && @pool ? pick(@pool)->[0] : gen_key();
		my $n = pick(1, 1, 2, 2, 3, 4, 0, 17);
		my (@rules, $valid, $minlim);
		$valid = key_ok($key) && $n >= 1 && $n <= 16;
		my %seen;
		for (1 .. $n)
		{
			my ($algo, $limit, $wtext, $wus) =
			  (gen_algo(), gen_limit(), gen_window());
			($algo, $wtext, $wus) = @{ $rules[-1] }[ 0, 2, 3 ]
			  if @rules && chance(0.1);
			push @rules, [ $algo, $limit, $wtext, $wus ];
			$valid &&= $IS_ALGO{$algo} && limit_ok($algo, $limit)
			  && window_ok($wus) && fine_ok($algo, $limit, $wus)
			  && !$seen{"$algo\0$wus"}++;
			$minlim = $limit if !defined $minlim || $limit < $minlim;
		}
		my $peek = chance(0.25);
		my $cost = $peek ? 0 : gen_cost($minlim // 1);
		$valid &&= !grep { !cost_ok($cost, $_->[1]) } @rules;
		my $rules_sql = 'ARRAY[' . join(', ', map {
			  'ROW(' . q_text($_->[0]) . ', ' . q_int($_->[1]) . ', '
				. q_win($_->[2]) . ')::rl_rule' } @rules) . ']::rl_rule[]';
		my $rulenull = $null && $n > 0 && $n <= 16;
		$rules_sql =~ s/ROW\(convert_from\('[^']*'::bytea, 'UTF8'\)/ROW(NULL/
		  if $rulenull;
		%c = (%c, kind => $peek ? 'peek_layered' : 'layered',
			rel => ($peek ? "rl_peek_layered(" . q_text($key) . ", $rules_sql)"
				: "rl_allow_layered(" . q_text($key) . ", $rules_sql, "
				  . q_int($cost) . ')'),
			layered => [ map { [ $key, @$_[ 0, 1, 3 ] ] } @rules ],
			lims => [], costs => [$cost], minlim => $minlim,
			rows => 1, runs => 1,
			expect => $valid && !$rulenull ? 'ok'
			: $rulenull ? [ $valid ? '22004' : ('22004', '22023') ] : ['22023']);
	}
	push @cases, \%c;

	# Remember accepted limiters, for reuse.
	if (!ref $c{expect} && !$redis_time)
	{
		for my $l (@{ $c{lims} })
		{
			my ($key, $algo, $limit, $wus) = @$l;
			my ($wtext) = ($c{rel} =~ /'([^']*)'::interval/);
			push @pool, [ $key, $algo, $limit, $wtext, $wus ]
			  if $c{kind} ne 'many' && @pool < 400;
		}
	}
}

my $nbad = grep { ref $_->{expect} } @cases;
note sprintf('%d cases: %d with invalid input, %d allow, %d peek, %d many, '
	  . '%d layered', scalar(@cases), $nbad,
	scalar(grep { $_->{kind} =~ /^allow/ } @cases),
	scalar(grep { $_->{kind} eq 'peek' } @cases),
	scalar(grep { $_->{kind} eq 'many' } @cases),
	scalar(grep { $_->{kind} =~ /layered/ } @cases));

# The cases go into a table; one PL/pgSQL function runs a range of them,
# each under its pinned clock, catching each error with its SQLSTATE.
{
	my @sql = (q{
CREATE TABLE cases (id int PRIMARY KEY, clock text, rel text);
CREATE TABLE results (id int, state text, msg text, a bool[], rem bigint[],
	retry bigint[], reset bigint[]);
CREATE FUNCTION prop_run(lo int, hi int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	c record;
	n int := 0;
	va bool[];
	vr bigint[];
	vt bigint[];
	vs bigint[];
	st text;
	msg text;
BEGIN
	FOR c IN SELECT * FROM cases WHERE id BETWEEN lo AND hi ORDER BY id LOOP
		PERFORM set_config('ratelimit.test_clock_ms', c.clock, false);
		BEGIN
			EXECUTE 'SELECT array_agg(allowed), array_agg(remaining), '
				'array_agg(retry_after_ms), array_agg(reset_after_ms) FROM '
				|| c.rel || ' r' INTO va, vr, vt, vs;
			INSERT INTO results VALUES (c.id, 'ok', NULL, va, vr, vt, vs);
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
			INSERT INTO results VALUES (c.id, st, msg, NULL, NULL, NULL, NULL);
		END;
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;
});
	my $ins = '';
	for my $c (@cases)
	{
		(my $rel = $c->{rel}) =~ s/'/''/g;
		$ins .= ($ins ? ",\n" : 'INSERT INTO cases VALUES ')
		  . "($c->{id}, '" . clock_text($c->{clock}) . "', '$rel')";
		if (length($ins) > 500_000)
		{
			push @sql, "$ins;";
			$ins = '';
		}
	}
	push @sql, "$ins;" if $ins;
	$node->safe_psql('postgres', $_) for @sql;
}

my $s = rl_session($node);
my ($pid) = rl_run($s, 'SELECT pg_backend_pid()');
my $postmaster = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
# Connect first, so that the counters below move only for script runs.
rl_run($s, "SELECT * FROM rl_peek('warmup', 'gcra', 1, '1 s')");
$redis->cli('CONFIG', 'RESETSTAT');
my ($calls0) = rl_run($s, 'SELECT calls FROM rl_status()');

my $t0 = time;
my $same_backend = 1;
for (my $lo = 1; $lo <= $NCASES; $lo += 500)
{
	my $hi = $lo + 499;
	my ($n, $err) = rl_run($s, "SELECT prop_run($lo, $hi)");
	my ($p) = rl_run($s, 'SELECT pg_backend_pid()');
	if ($p ne $pid || $n !~ /^\d+$/)
	{
		$same_backend = 0;
		diag "cases $lo..$hi: backend $pid -> '$p', output '$n', stderr: $err";
		last;
	}
}
my $elapsed = time - $t0;
note sprintf('%d cases in %.1f s', $NCASES, $elapsed);
ok($same_backend, 'one backend answered every case (no crash, no reconnect of the session)');

# Results, one line per case: id, state, then the answer columns.
my %res;
for my $line (split /\n/, $node->safe_psql('postgres', q{
	SELECT id, state, coalesce(array_to_string(a, ',', 'N'), '-'),
		coalesce(array_to_string(rem, ',', 'N'), '-'),
		coalesce(array_to_string(retry, ',', 'N'), '-'),
		coalesce(array_to_string(reset, ',', 'N'), '-')
	FROM results ORDER BY id}))
{
	my ($id, $state, @cols) = split /\|/, $line;
	$res{$id} = [ $state, map { $_ eq '-' ? [] : [ split /,/, $_ ] } @cols ];
}

my (%fail, @examples, $answers, $rejected, $script_runs);
sub bad
{
	my ($what, $c, $detail) = @_;
	$fail{$what}++;
	push @examples, "$what: case $c->{id} ($c->{kind}) clock "
	  . clock_text($c->{clock}) . ": $detail\n    $c->{rel}"
	  if grep({ /^\Q$what\E:/ } @examples) < 3;
}

for my $c (@cases)
{
	my $r = $res{ $c->{id} };
	if (!$r)
	{
		bad('no result', $c, '');
		next;
	}
	my ($state, $a, $rem, $retry, $reset) = @$r;
	if ($state ne 'ok')
	{
		if (!ref $c->{expect})
		{
			my $msg = $node->safe_psql('postgres',
				"SELECT msg FROM results WHERE id = $c->{id}");
			bad('valid input refused', $c, "$state $msg");
		}
		elsif (!grep { $_ eq $state } @{ $c->{expect} })
		{
			bad('wrong SQLSTATE', $c, "$state, expected @{ $c->{expect} }");
		}
		else
		{
			$rejected++;
		}
		next;
	}
	if (ref $c->{expect})
	{
		bad('invalid input accepted', $c, "expected @{ $c->{expect} }");
		next;
	}
	$script_runs += $c->{runs};
	if (@$a != $c->{rows})
	{
		bad('row count', $c, scalar(@$a) . " rows, expected $c->{rows}");
		next;
	}
	for my $i (0 .. $#$a)
	{
		$answers++;
		my $limit =
		  $c->{kind} =~ /layered/ ? $c->{minlim} : $c->{lims}[$i][2];
		my $cost = $c->{costs}[ $c->{kind} eq 'many' ? $i : 0 ] // 0;
		my ($al, $re, $rt, $rs) = ($a->[$i], $rem->[$i], $retry->[$i], $reset->[$i]);
		my $ans = "($al,$re,$rt,$rs) limit $limit cost $cost";
		if ($re eq 'N' || $rt eq 'N' || $rs eq 'N' || $al !~ /^[tf]$/)
		{
			bad('not answered by Redis', $c, $ans);
			next;
		}
		bad('remaining out of 0..limit', $c, $ans) if $re < 0 || $re > $limit;
		bad('allowed but remaining > limit - cost', $c, $ans)
		  if $al eq 't' && $re > $limit - $cost;
		bad('allowed with retry_after_ms <> 0', $c, $ans) if $al eq 't' && $rt != 0;
		bad('denied with retry_after_ms < 1', $c, $ans) if $al eq 'f' && $rt < 1;
		bad('reset_after_ms < 0', $c, $ans) if $rs < 0;
		bad('cost 0 denied', $c, $ans) if $cost == 0 && $al eq 'f';
	}
}
note "rejected as documented: $rejected; answers checked: $answers";
for my $what (sort keys %fail)
{
	note "$what: $fail{$what}";
}
diag $_ for @examples;
is(scalar(keys %fail), 0,
	"every case: refused exactly when the input rules say, with 22004/22023, "
	  . "and every answer within the contract (seed $seed)");
is($rejected, $nbad, "all $nbad invalid inputs refused");

# Refused input made no round trip; every accepted call made exactly one
# script run (FCALL, EVALSHA, or EVAL after NOSCRIPT), a batch's keys
# one run for all.
{
	my ($st) = rl_run($s,
		'SELECT calls, fail_open, fail_closed, failures, script_loads FROM rl_status()');
	my ($calls, $open, $closed, $failures, $loads) = split /\|/, $st;
	my $evalsha = $redis->cmdstat('evalsha');
	my $eval = $redis->cmdstat('eval');
	my $fcall = $redis->cmdstat('fcall');
	my $runs = $redis->script_runs;
	note "script runs: fcall $fcall->{calls} (failed $fcall->{failed_calls}), "
	  . "evalsha $evalsha->{calls} (failed $evalsha->{failed_calls}), "
	  . "eval $eval->{calls}; rl_status calls " . ($calls - $calls0);
	is($runs, $script_runs,
		"Redis ran exactly one script per accepted call, a batch's keys in one ($script_runs), none for refused input");
	is("$open|$closed|$failures", '0|0|0', 'no policy answer, no failure');
}

# The server is as it was: same postmaster, no backend died.
{
	my $now_pm = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	is($now_pm, $postmaster, 'no crash restart (checkpointer unchanged)');
	my $log = slurp_file($node->logfile);
	unlike($log, qr/terminated by signal|was terminated|PANIC|TRAP:/,
		'the server log shows no crashed process');
	my $ks = $redis->info('keyspace', 'db0') // '';
	my ($keys, $exp) = $ks =~ /keys=(\d+),expires=(\d+)/;
	note "keyspace after the random calls: $ks";
	is($exp, $keys, 'every key the random calls wrote has a TTL');
}
fact('bad_inputs.005', $rejected // 0);
fact('figure.005', sprintf('property: seed %d, %d random calls (%d invalid) in %.1f s, '
	  . '%d answers within the contract', $seed, $NCASES, $nbad, $elapsed, $answers // 0));
fact('checked_answers.005', $answers // 0);

# ---------------------------------------------------------------------
# 2. Model check.  Exact integer models of the scripts in lua/: the same
# state, the same arithmetic, with divisions kept as fractions and
# rounded up to whole milliseconds only at the end, as the contract says.

sub fdiv    # floor(a / b), b > 0
{
	my ($a, $b) = @_;
	use integer;
	my $q = $a / $b;
	$q-- if $q * $b > $a;
	return $q;
}

sub ms_of    # whole ms, rounded up, of num/den microseconds; 0 if <= 0
{
	my ($num, $den) = @_;
	$den //= 1;
	return 0 if $num <= 0;
	return -fdiv(-$num, $den * 1000);
}

# Each model: (state, limit, window, cost, now, burst) ->
#   (ok, remaining, [retry num, den], [reset num, den], new state)
# where the new state is undef when the call writes nothing.  burst is
# the capacity of the buckets and GCRA: the limit unless one is set.
my %MODEL = (
	fixed_window => sub {
		my ($st, $L, $W, $c, $now) = @_;
		my $start = $now - $now % $W;
		my $used = 0;
		my $w = $st ? $st->{w} - $st->{w} % $W : 0;
		if ($st && $w >= $start)
		{
			($start, $used) = ($w, $st->{n} < $L ? $st->{n} : $L);
		}
		my $ends = $start + $W;
		return (0, $L - $used, [ $ends - $now ], [ $ends - $now ])
		  if $used + $c > $L;
		$used += $c;
		return (1, $L - $used, [0], [ $used > 0 ? $ends - $now : 0 ],
			$c > 0 ? { w => $start, n => $used } : undef);
	},
	sliding_log => sub {
		# The log as entries [time, cost] in rank order, and the unit
		# counter of the newest; expired entries leave 64 at most per
		# admitted call, or all when none is left in the window.
		my ($st, $L, $W, $c, $now) = @_;
		my @e = $st ? @{ $st->{e} } : ();
		my $cum = $st ? $st->{cum} : 0;
		my $stamp = @e && $e[-1][0] > $now ? $e[-1][0] : $now;
		my $floor = $now - $W;
		my @in = grep { $_->[0] > $floor } @e;
		my $used = 0;
		$used += $_->[1] for @in;
		my $reset = $used > 0 ? $e[-1][0] + $W - $now : 0;
		if ($used + $c > $L)
		{
			my ($k, $sum, $t) = ($used + $c - $L, 0);
			for my $x (@in)
			{
				$sum += $x->[1];
				$t = $x->[0], last if $sum >= $k;
			}
			return (0, $L - $used, [ $t + $W - $now ], [$reset]);
		}
		return (1, $L - $used, [0], [$reset]) if $c == 0;
		my $drop = @e - @in;
		$drop = 64 if $drop > 64;
		@e = @in ? @e[ $drop .. $#e ] : ();
		$cum = 0 unless @in;
		return (1, $L - $used - $c, [0], [ $stamp + $W - $now ],
			{ e => [ @e, [ $stamp, $c ] ], cum => $cum + $c });
	},
	sliding_counter => sub {
		my ($st, $L, $W, $c, $now) = @_;
		my ($at, $start, $cur, $prev) = ($now, $now - $now % $W, 0, 0);
		if ($st)
		{
			my $w = $st->{w} - $st->{w} % $W;
			my ($scur, $sprev) = map { $_ < $L ? $_ : $L } @$st{qw(cur prev)};
			if ($w >= $start)
			{
				$at = $w if $w > $start;
				($start, $cur, $prev) = ($w, $scur, $sprev);
			}
			elsif ($w == $start - $W)
			{
				$prev = $scur;
			}
		}
		my $shift = $at - $now;
		my $left = $W - ($at - $start);
		my $used = $prev * $left + $cur * $W;
		my $remaining = $L - $cur + fdiv(-$prev * $left, $W);   # - ceil()
		if ($used + $c * $W > $L * $W)
		{
			my $retry = $cur + $c <= $L
			  ? [ ($shift + $left) * $prev - ($L - $cur - $c) * $W, $prev ]
			  : [ ($shift + $left + $W) * $cur - ($L - $c) * $W, $cur ];
			return (0, $remaining, $retry,
				[ $shift + $left + ($cur > 0 ? $W : 0) ]);
		}
		my $reset = $cur + $c > 0 ? $shift + $left + $W
		  : $prev > 0 ? $shift + $left : 0;
		return (1, $remaining - $c, [0], [$reset],
			$c > 0 ? { w => $start, cur => $cur + $c, prev => $prev } : undef);
	},
	token_bucket => sub {
		my ($st, $L, $W, $c, $now, $B) = @_;
		my $g = gcd($L, $W);
		my ($unit, $rate) = (fdiv($W, $g), fdiv($L, $g));
		my $full = $B * $unit;
		# A bucket refills (or drains) fully within this time.
		my $span = $W * (1 + fdiv($B, $L));
		my ($credit, $ts) = ($full, $now);
		if ($st)
		{
			($credit, $ts) = ($st->{credit}, $st->{ts});
			if ($now > $ts)
			{
				$credit = $now - $ts >= $span ? $full : $credit + ($now - $ts) * $rate;
				$ts = $now;
			}
			$credit = $full if $credit > $full;
		}
		my $shift = $ts - $now;
		my $need = $c * $unit;
		return (0, fdiv($credit, $unit), [ $shift * $rate + $need - $credit, $rate ],
			[ $shift * $rate + $full - $credit, $rate ])
		  if $credit < $need;
		$credit -= $need;
		return (1, fdiv($credit, $unit), [0],
			[ $shift * $rate + $full - $credit, $rate ],
			$c > 0 ? { credit => $credit, ts => $ts } : undef);
	},
	leaky_bucket => sub {
		my ($st, $L, $W, $c, $now, $B) = @_;
		my $g = gcd($L, $W);
		my ($unit, $rate) = (fdiv($W, $g), fdiv($L, $g));
		my $full = $B * $unit;
		my $span = $W * (1 + fdiv($B, $L));
		my ($level, $ts) = (0, $now);
		if ($st)
		{
			($level, $ts) = ($st->{level}, $st->{ts});
			$level = $full if $level > $full;
			if ($now > $ts)
			{
				$level = $now - $ts >= $span ? 0 : $level - ($now - $ts) * $rate;
				$level = 0 if $level < 0;
				$ts = $now;
			}
		}
		my $shift = $ts - $now;
		my $pour = $c * $unit;
		if ($level + $pour > $full)
		{
			my $room = $full - $level;
			return (0, fdiv($room > 0 ? $room : 0, $unit),
				[ $shift * $rate + $level + $pour - $full, $rate ],
				[ $shift * $rate + $level, $rate ]);
		}
		$level += $pour;
		return (1, fdiv($full - $level, $unit), [0],
			[ $level > 0 ? $shift * $rate + $level : 0, $rate ],
			$c > 0 ? { level => $level, ts => $ts } : undef);
	},
	gcra => sub {
		my ($st, $L, $W, $c, $now, $B) = @_;
		my $g = gcd($L, $W);
		my ($unit, $rate) = (fdiv($W, $g), fdiv($L, $g));
		my $full = $B * $unit;
		my $debt = 0;
		if ($st)
		{
			# At most a tolerance (burst x T) as of the write, then
			# drained since.
			$debt = ($st->{us} - $st->{ts}) * $rate + $st->{r};
			$debt = $full if $debt > $full;
			$debt -= ($now - $st->{ts}) * $rate;
			$debt = 0 if $debt < 0;
		}
		my $after = $debt + $c * $unit;
		return (0, fdiv($full - $debt, $unit), [ $after - $full, $rate ],
			[ $debt, $rate ])
		  if $after > $full;
		my $r = $after % $rate;
		return (1, fdiv($full - $after, $unit), [0], [ $after, $rate ],
			$c > 0 ? { us => $now + fdiv($after - $r, $rate), r => $r, ts => $now }
			: undef);
	},);

# The state a script left under a key, in the model's terms.
sub redis_state
{
	my ($algo, $rkey) = @_;
	# Every algorithm but the sliding log keeps its numbers in one binary
	# string (RLRedis::state_numbers).
	if ($algo eq 'fixed_window')
	{
		my @n = $redis->limiter_state($rkey);
		return @n ? { w => $n[0], n => $n[1] } : undef;
	}
	if ($algo eq 'sliding_counter')
	{
		my @n = $redis->limiter_state($rkey);
		return @n ? { w => $n[0], cur => $n[1], prev => $n[2] } : undef;
	}
	if ($algo eq 'token_bucket' || $algo eq 'leaky_bucket')
	{
		my $f = $algo eq 'token_bucket' ? 'credit' : 'level';
		my @n = $redis->limiter_state($rkey);
		return @n ? { $f => $n[0], ts => $n[1] } : undef;
	}
	if ($algo eq 'gcra')
	{
		my @n = $redis->limiter_state($rkey);
		return @n ? { us => $n[0], r => $n[1], ts => $n[3] } : undef;
	}
	# sliding_log: members (cum, cost, time, live) as four big-endian
	# doubles, in rank order; each cum must be the one before it plus its
	# cost, each time the member's score.
	my $v = $redis->cmd('ZRANGE', $rkey, 0, -1, 'WITHSCORES');
	return undef unless @$v;
	my (@e, $cum, $sums);
	for (my $i = 0; $i < @$v; $i += 2)
	{
		return { bad => $v->[$i] } unless length($v->[$i]) == 32;
		my ($n, $c, $t) = map { sprintf('%.0f', $_) } unpack('d> d> d>', $v->[$i]);
		return { bad => "time $t, score $v->[$i + 1]" } unless $t == $v->[ $i + 1 ];
		$sums = 1 if defined $cum && $n != $cum + $c;
		$cum = $n + 0;
		push @e, [ $v->[ $i + 1 ] + 0, $c + 0 ];
	}
	return { e => \@e, cum => $cum, $sums ? (sums => 'broken') : () };
}

sub state_text
{
	my ($st) = @_;
	return 'none' unless $st;
	return join(',', map {
		my $v = $st->{$_};
		"$_=" . (ref $v ? scalar(@$v) . ' entries ' . join(' ', map { "$_->[0]x$_->[1]" } @$v)
			  : $v =~ /^\d+$/ ? $v + 0 : $v) } sort keys %$st);
}

my @triples;
for my $algo (@ALGOS)
{
	push @triples, [ $algo, pick(1, 2, 3, 5, 7), pick(7_000_000, 60_000_000) ];
	push @triples, [ $algo, pick(10, 60, 97, 100, 1000),
		pick(1_000_000, 3_600_000_000, 86_400_000_000, 30 * $US_DAY) ];
	push @triples, [ $algo, pick(4, 6, 13, 24), pick(2_500_000, 1_000_001, 86_400_000_000 + 7) ];
}
push @triples, [ pick(@ALGOS), pick(3, 10), 20_000 ];    # a 20 ms window
push @triples, [ pick(@ALGOS), 1, 1000 ];                 # 1 per ms
# Bursts: a capacity above the limit, and one below it.
for my $algo (qw(token_bucket leaky_bucket gcra))
{
	my ($L, $W) = (pick(1, 2, 3, 5), pick(7_000_000, 60_000_000));
	push @triples, [ $algo, $L, $W, pick($L + 1, 2 * $L + 1, 4 * $L, 10 + rnd(20)) ];
	($L, $W) = (pick(10, 24, 60, 97), pick(1_000_000, 2_500_000, 3_600_000_000));
	push @triples, [ $algo, $L, $W, pick(1, 2, 1 + rnd($L - 1)) ];
}
my ($steps_total, $mismatches, $expired) = (0, 0, 0);
my $ms = rl_session($node);
for my $ti (0 .. $#triples)
{
	my ($algo, $L, $W, $B) = @{ $triples[$ti] };
	my $cap = $B // $L;
	my $burst = defined $B ? ", burst => $B" : '';
	my $key = "model:$seed:$ti";
	# The Redis key names the limiter's parameters (window in ms when whole).
	my $rkey = "rl:{$dboid:$key}:$algo:$L:"
	  . ($W % 1000 ? "${W}us" : ($W / 1000) . 'ms') . (defined $B && $B != $L ? ":b$B" : '');
	my $now = 1_700_000_000_000_000 + rnd(1_000_000_000) * 1000 + rnd(1000);
	my $st;
	my $live = 0;    # sliding log: the model's time its key lives until
	my $kept_ms = 0;    # and the TTL the test gave it last
	my $step_us = int($W / $L) || 1;
	my ($steps, $bad) = (0, 0);
	my $nsteps = $W < 1_000_000 ? 25 : 150;
	my %seen = (t => 0, f => 0, back => 0);
	# What Redis holds after a write must be the model's state.
	my $same_state = sub {
		my $rs = redis_state($algo, $rkey);
		return if state_text($rs) eq state_text($st);
		$bad++;
		diag "model $algo: Redis holds " . state_text($rs)
		  . ', model ' . state_text($st) if $bad <= 3;
		$st = $rs;
	};
	for my $i (1 .. $nsteps)
	{
		my $r = rand();
		if    ($r < 0.15) { }
		elsif ($r < 0.75) { $now += rnd(2 * $step_us) }
		elsif ($r < 0.85) { $now += rnd(1000) }
		elsif ($r < 0.92) { $now += $W + rnd($W) }
		else              { $now -= rnd(int($W / 2)); $seen{back}++ }
		my $c = chance(0.6) ? 1 : chance(0.3) ? 0 : 1 + rnd($cap);

		my ($ok, $rem, $retry, $reset, $new) =
		  $MODEL{$algo}->($st, $L, $W, $c, $now, $cap);
		$ok = 1 if $c == 0;		# a peek is always admitted (README)
		my $want = join('|', $ok ? 't' : 'f', $rem < 0 ? 0 : $rem,
			$ok ? 0 : do { my $m = ms_of(@$retry); $m < 1 ? 1 : $m },
			ms_of(@$reset));
		my ($got) = rl_run($ms,
			"SET ratelimit.test_clock_ms = '" . clock_text($now) . "';\n"
			  . "SELECT allowed, remaining, retry_after_ms, reset_after_ms "
			  . "FROM rl_allow('$key', '$algo', $L, '$W microseconds', $c$burst)");
		$steps++;
		$seen{ substr($got, 0, 1) }++;
		if ($got ne $want)
		{
			$bad++;
			diag "model $algo limit $L window ${W}us burst $cap step $i at "
			  . clock_text($now) . " cost $c: got $got, model $want; "
			  . 'state before: ' . state_text($st)
			  if $bad <= 3;
		}
		my $before = $st;
		$st = $new if $new;

		# Redis keys expire in real time, the pinned clock does not move:
		# keep a written key (PERSIST), unless its TTL is too short to
		# catch, in which case wait for it to go and start fresh.
		next unless $new;
		my $ttl_ms = ms_of(@$reset);
		# The sliding log renews its TTL only when the key would end
		# before this call's member leaves the window, or when it starts
		# afresh, and then for half a window more (lua/sliding_log.lua):
		# the model follows it.  Its key is kept by a TTL one hour longer
		# (PERSIST would hide a missed renewal).
		my $renew = 1;
		my $cover_ms = $ttl_ms;
		if ($algo eq 'sliding_log')
		{
			my @e = $before ? @{ $before->{e} } : ();
			my $in = grep { $_->[0] > $now - $W } @e;
			my $stamp = @e && $e[-1][0] > $now ? $e[-1][0] : $now;
			$renew = !$in || $live < $stamp + $W;
			if ($renew)
			{
				$ttl_ms = ms_of(2 * ($stamp + $W - $now) + $W, 2) || 1;
				$live = $now + $ttl_ms * 1000 - ($W / 4 > 2000 ? $W / 4 : 2000);
			}
			elsif ($cover_ms < 50)
			{
				# A window this short always starts afresh here.
				$bad++;
				diag "model $algo: a short window's write kept an old TTL";
			}
		}
		if ($ttl_ms < 50)
		{
			$live = 0;
			usleep(($ttl_ms + 30) * 1000);
			$expired++;
			if ($redis->cmd('EXISTS', $rkey))
			{
				$bad++;
				diag "model $algo: key still there after its TTL of $ttl_ms ms";
			}
			$st = undef;
			next;
		}
		my $pttl = $redis->cmd('PTTL', $rkey);
		if ($algo eq 'sliding_log' && !$renew)
		{
			# Not renewed: the TTL the test set last is untouched (and by
			# the model's live, it covers the newest member's window).
			if ($pttl < $kept_ms - 10_000)
			{
				$bad++;
				diag "model $algo: PTTL $pttl without a renewal, the test had set $kept_ms";
			}
			$same_state->();
			next;
		}
		if ($algo eq 'sliding_log' && $pttl > 0 && $pttl < $cover_ms - 100)
		{
			$bad++;
			diag "model $algo: renewed PTTL $pttl, below reset_after_ms $cover_ms";
		}
		$kept_ms = $pttl + 3_600_000;
		if ($algo eq 'sliding_log'
			? !$redis->cmd('PEXPIRE', $rkey, $kept_ms)
			: !$redis->cmd('PERSIST', $rkey))
		{
			# Gone before we could keep it: only a short TTL may do that.
			$expired++;
			if ($ttl_ms >= 1000)
			{
				$bad++;
				diag "model $algo: key with a TTL of $ttl_ms ms vanished";
			}
			$st = undef;
			next;
		}
		if ($pttl < 1 || $pttl > $ttl_ms)
		{
			$bad++;
			diag "model $algo: PTTL $pttl after a write, reset_after_ms $ttl_ms";
		}
		$same_state->();
	}
	$steps_total += $steps;
	$mismatches += $bad;
	is($bad, 0, "model check $algo, limit $L, window ${W} us"
		  . (defined $B ? ", burst $B" : '') . ": $steps steps match the model");
	note "  $seen{t} allowed, $seen{f} denied, $seen{back} clock steps back";
}
note "model check: $steps_total steps, $expired short-TTL keys waited out";
fact('figure.005', sprintf('model check: %d triples, %d steps, %d mismatches with the '
	  . 'exact models', scalar(@triples), $steps_total, $mismatches));
fact('count_checks.005', $steps_total);
fact('miscounted.005', $mismatches);

$s->quit;
$ms->quit;
$node->stop;
done_testing();
