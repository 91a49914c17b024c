# test/t/011_redis_work.pl
#
# The work one call can ask of the shared Redis is bounded.  A script
# blocks every other client of Redis while it runs, so one caller with
# extreme but accepted arguments must not be able to hold Redis for long.
#
# 1. For each entry point (rl_allow per algorithm, rl_allow_layered with
#    16 rules, rl_allow_many with 1000 keys, the statement trigger with
#    10 000 keys in both forms) its worst accepted call runs while SLOWLOG
#    records every command; the longest script run is published as a
#    figure.  Timings are not asserted (the machine is shared); the
#    quantities that bound them are: keys per script, members stored.
# 2. Six pgbench sessions send those calls in a loop while a victim calls
#    a quiet key: the victim gets no answer from the failure policy, and
#    its latency is published against its latency alone.  First beside
#    sessions sending ordinary calls, for comparison; then beside the
#    worst calls of the statement trigger, rl_allow_many and
#    rl_allow_layered; then with rl_allow's own sliding log among them.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

use RLRedis qw(rl_node rl_session rl_run fact);

# Keys per script run of the statement trigger (RL_STATEMENT_CHUNK).
my $chunk = 64;
my $chunks = int((10000 + $chunk - 1) / $chunk);

my $redis = RLRedis->new(name => 'r011');
# The victim keeps rl_node's command_timeout (300 ms); the measurements
# below raise it for their own session so that a long script is timed,
# not cut short.
my $node = rl_node('c011', $redis, qq{
ratelimit.connect_timeout = 3000
ratelimit.deny_cache = off
});
my $s = rl_session($node);
rl_run($s, 'SET ratelimit.command_timeout = 60000');

$redis->cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
$redis->cmd('CONFIG', 'SET', 'slowlog-max-len', 100000);

sub ms { sprintf('%.2f ms', $_[0] / 1000) }

# Runs SQL in the measuring session with SLOWLOG reset before; returns
# {max => longest script run in us, scripts => number of script runs,
# keys => most keys in one script run, out, err}.
sub measure
{
	# Every command, those the script runs included (well below the log's
	# 100000 entries for any call here).
	$redis->cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
	my ($sql) = @_;
	$redis->cmd('SLOWLOG', 'RESET');
	my ($out, $err) = rl_run($s, $sql);
	my $log = $redis->cmd('SLOWLOG', 'GET', -1);
	my %r = (max => 0, sum => 0, scripts => 0, keys => 0, out => $out, err => $err);
	for my $e (@$log)
	{
		my ($dur, $args) = @$e[ 2, 3 ];
		next unless uc($args->[0]) =~ /^(EVALSHA|EVAL|FCALL)$/;
		$r{scripts}++;
		$r{max} = $dur if $dur > $r{max};
		$r{sum} += $dur;
		$r{keys} = $args->[2] if $args->[2] > $r{keys};
	}
	return \%r;
}

# Runs SQL and records its longest script run under a name.
sub worst
{
	my ($name, $sql) = @_;
	my $r = measure($sql);
	note sprintf('%s: longest script %s over %d script runs, at most %d keys in one',
		$name, ms($r->{max}), $r->{scripts}, $r->{keys});
	is($r->{err}, '', "$name: no error") or diag $r->{err};
	ok($r->{scripts} > 0, "$name: ran scripts in Redis");
	return $r;
}

my %fig;    # entry point -> longest script run (us)

# 1a. rl_allow, per algorithm: the largest limit, window and cost it
# accepts, on a fresh key and again on the key it left.
my %big = (
	fixed_window => [ 1000000000, '366 days' ],
	sliding_counter => [ 1000000000, '366 days' ],
	token_bucket => [ 1000000000, '366 days' ],
	leaky_bucket => [ 1000000000, '366 days' ],
	gcra => [ 1000000000, '366 days' ],
	sliding_log => [ 100000, '30 seconds' ]);
for my $algo (sort keys %big)
{
	my ($limit, $window) = @{ $big{$algo} };
	my $max = 0;
	for my $i (1 .. 2)
	{
		my $r = worst("rl_allow $algo, cost $limit, call $i",
			"SELECT allowed FROM rl_allow('w1:$algo', '$algo', $limit, '$window', $limit)");
		$max = $r->{max} if $r->{max} > $max;
	}
	$fig{"rl_allow $algo"} = $max;
}

# The sliding log's worst is a key holding many entries: 2000 calls of
# cost 1, each a millisecond apart, then the largest call it admits and
# one it must refuse.
{
	my $t0 = 1_800_000_000_000;
	rl_run($s, qq{DO \$\$ BEGIN FOR i IN 1..2000 LOOP
		PERFORM set_config('ratelimit.test_clock_ms', ($t0 + i)::text, false);
		PERFORM rl_allow('w1:many', 'sliding_log', 100000, '30 seconds', 1);
		END LOOP; END \$\$});
	rl_run($s, 'SET ratelimit.test_clock_ms = ' . ($t0 + 3000));
	my $a = worst('rl_allow sliding_log, 2000 entries, cost 98000',
		"SELECT allowed FROM rl_allow('w1:many', 'sliding_log', 100000, '30 seconds', 98000)");
	is($a->{out}, 't', 'sliding log with 2000 entries: admits 98000 more');
	my $d = worst('rl_allow sliding_log, full, cost 100000 refused',
		"SELECT allowed FROM rl_allow('w1:many', 'sliding_log', 100000, '30 seconds', 100000)");
	is($d->{out}, 'f', 'full sliding log: refuses 100000 more');
	rl_run($s, 'RESET ratelimit.test_clock_ms');
	for my $r ($a, $d)
	{
		$fig{'rl_allow sliding_log'} = $r->{max}
		  if $r->{max} > $fig{'rl_allow sliding_log'};
	}
}

# What one admitted call of cost 100000 stores: bounded, not one member
# per unit (about 12 MB in 0.1.0).
my $log_key = (grep { /w1:sliding_log/ } $redis->scan_all)[0];
my $log_bytes = $redis->cmd('MEMORY', 'USAGE', $log_key) // 0;
note "sliding log key after two calls of cost 100000: $log_bytes bytes";
my $log_bounded = $log_bytes < 65536;
ok($log_bounded, "sliding log: a call of cost 100000 stores $log_bytes bytes (< 64 kB)");
fact('figure.011', "work: sliding_log key after 2 calls of cost 100000 stores $log_bytes bytes");

# The costs the heavier cases below use for the sliding log: its largest
# when a call's work is bounded, else 1 (at 0.1.0, 1000 calls of cost
# 100000 would store 12 GB and run for minutes).
my $log_cost = $log_bounded ? 100000 : 1;
note "sliding log cost in the cases below: $log_cost" unless $log_bounded;

# 1b. rl_allow_layered: 16 sliding-log rules (the dearest algorithm), the
# largest limit, the largest cost; on a fresh key and again.
{
	my $rules = 'ARRAY['
	  . join(', ',
		map { "('sliding_log', 100000, '" . (20 + $_) . " seconds')::rl_rule" }
		  1 .. 16)
	  . ']';
	my $max = 0;
	for my $i (1 .. 2)
	{
		my $r = worst("rl_allow_layered, 16 sliding_log rules, cost $log_cost, call $i",
			"SELECT allowed FROM rl_allow_layered('w2', $rules, $log_cost)");
		$max = $r->{max} if $r->{max} > $max;
	}
	my $mixed = 'ARRAY['
	  . join(', ',
		map {
			my $a = (sort keys %big)[ $_ % 6 ];
			"('$a', $big{$a}[0], '" . (20 + $_) . " seconds')::rl_rule"
		} 1 .. 16)
	  . ']';
	for my $i (1 .. 2)
	{
		my $r = worst("rl_allow_layered, 16 rules of all algorithms, cost $log_cost, call $i",
			"SELECT allowed FROM rl_allow_layered('w2m', $mixed, $log_cost)");
		$max = $r->{max} if $r->{max} > $max;
	}
	$fig{'rl_allow_layered 16 rules'} = $max;
}

# 1c. rl_allow_many: 1000 keys per round trip at the largest cost, every
# algorithm.
{
	my ($max, $sum) = (0, 0);
	for my $algo (sort keys %big)
	{
		my ($limit, $window) = @{ $big{$algo} };
		my $cost = $algo eq 'sliding_log' ? $log_cost : $limit;
		my $r = worst("rl_allow_many $algo, 1000 keys, cost $cost",
			"SELECT count(*) FILTER (WHERE allowed) FROM rl_allow_many("
			  . "ARRAY(SELECT 'w3:' || g FROM generate_series(1, 1000) g), "
			  . "'$algo', $limit, '$window', $cost)");
		is($r->{out}, '1000', "rl_allow_many $algo: 1000 of 1000 allowed");
		note sprintf('rl_allow_many %s: Redis ran its 1000 scripts for %s in all',
			$algo, ms($r->{sum}));
		$max = $r->{max} if $r->{max} > $max;
		$sum = $r->{sum} if $r->{sum} > $sum;
	}
	$fig{'rl_allow_many 1000 keys'} = $max;
	fact('figure.011', 'work: rl_allow_many, 1000 keys of the dearest algorithm: '
		  . ms($sum) . ' of script runs in all');
}

# Several callers of rl_allow_many at once: each round trip's replies
# must come within the caller's own command_timeout (300 ms) while Redis
# serves the others too.  A policy answer divides by zero.
{
	my $file = $node->basedir . '/many.sql';
	PostgreSQL::Test::Utils::append_to_file($file, qq{\\set k random(1, 1000000000)
SELECT 1 / (count(*) FILTER (WHERE remaining IS NULL) = 0)::int FROM rl_allow_many(
	ARRAY(SELECT 'w6:' || :k || ':' || g FROM generate_series(1, 1000) g),
	'leaky_bucket', 1000000000, '1 second', 1000000000);
});
	my ($out, $err) = ('', '');
	IPC::Run::run [
		'pgbench', '-n', '-c', 8, '-j', 2, '-T', 4, '-f', $file,
		'-h', $node->host, '-p', $node->port, 'postgres'
	  ],
	  '<', \undef, '>', \$out, '2>', \$err;
	my ($tx) = $out =~ /actually processed: (\d+)/;
	my ($tps) = $out =~ /tps = ([\d.]+)/;
	note "8 sessions of rl_allow_many, 1000 keys each: $tx calls, $tps per second";
	unlike($err, qr/ERROR|aborted/, '8 concurrent rl_allow_many callers: no policy answer')
	  or diag $err;
	ok($tx > 0, "8 concurrent rl_allow_many callers: $tx calls");
	fact('figure.011', sprintf('work: 8 sessions of rl_allow_many (1000 keys) at once: '
		  . '%d calls, %.1f per second, %s', $tx // 0, $tps // 0,
		$err =~ /ERROR|aborted/ ? 'some answered by the policy' : 'none answered by the policy'));
}

# 1d. The statement trigger, both forms, 10 000 keys, every algorithm;
# each key's cost is the largest (a cost column) for the transition
# table, one row per key for the pair.
{
	my $max = 0;
	my $maxkeys = 0;
	for my $algo (sort keys %big)
	{
		my ($limit, $window) = @{ $big{$algo} };
		my $cost = $algo eq 'sliding_log' ? $log_cost : $limit;
		$node->safe_psql('postgres', qq{
CREATE TABLE w4_$algo (k int, units bigint);
CREATE TRIGGER t AFTER INSERT ON w4_$algo REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION
	rl_throttle_statement('k', '$algo', '$limit', '$window', 'raise', 'units');
CREATE TABLE w5_$algo (k int);
CREATE TRIGGER c BEFORE INSERT ON w5_$algo FOR EACH ROW EXECUTE FUNCTION
	rl_throttle_statement('k', '$algo', '$limit', '$window');
CREATE TRIGGER t AFTER INSERT ON w5_$algo FOR EACH STATEMENT EXECUTE FUNCTION
	rl_throttle_statement('k', '$algo', '$limit', '$window');
});
		for my $form ([ 'transition table', "w4_$algo", ", $cost" ],
			[ 'row + statement', "w5_$algo", '' ])
		{
			my ($what, $table, $units) = @$form;
			my $r = worst("statement trigger ($what) $algo, 10000 keys",
				"INSERT INTO $table SELECT g$units FROM generate_series(1, 10000) g");
			is($r->{scripts}, $chunks,
				"statement trigger ($what) $algo: 10000 keys in $chunks script runs");
			ok($r->{keys} <= $chunk,
				"statement trigger ($what) $algo: at most $chunk keys per script ($r->{keys})");
			$max = $r->{max} if $r->{max} > $max;
			$maxkeys = $r->{keys} if $r->{keys} > $maxkeys;
		}
	}
	$fig{"statement trigger 10000 keys ($maxkeys keys per script)"} = $max;
}

for my $k (sort keys %fig)
{
	fact('figure.011', "work: longest script run, $k: " . ms($fig{$k}));
}

# 2. The victim.  Its calls: a quiet fixed-window key, failure_mode
# open, 100 calls 20 ms apart, each timed inside the backend.
$node->safe_psql('postgres', q{
CREATE FUNCTION victim(n int) RETURNS TABLE(policy bigint, median_ms float8, max_ms float8)
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz;
	r rl_result;
	lat float8[] := '{}';
	nulls bigint := 0;
BEGIN
	FOR i IN 1..n LOOP
		t0 := clock_timestamp();
		r := rl_allow('victim', 'fixed_window', 1000000000, '1 hour');
		lat := lat || extract(epoch FROM clock_timestamp() - t0) * 1000;
		IF r.remaining IS NULL THEN
			nulls := nulls + 1;
		END IF;
		PERFORM pg_sleep(0.02);
	END LOOP;
	RETURN QUERY SELECT nulls,
		(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(lat) x),
		(SELECT max(x) FROM unnest(lat) x);
END $$;
CREATE UNLOGGED TABLE atk_stmt (k bigint);
CREATE TRIGGER t AFTER INSERT ON atk_stmt REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION
	rl_throttle_statement('k', 'sliding_log', '100000', '1 second');
});
my $v = rl_session($node);

# (policy answers, median ms, max ms, fail_open + fail_closed counted).
sub victim_run
{
	my ($before) = rl_run($v, 'SELECT fail_open + fail_closed FROM rl_status()');
	my ($out, $err) = rl_run($v, 'SELECT * FROM victim(100)');
	my ($after) = rl_run($v, 'SELECT fail_open + fail_closed FROM rl_status()');
	unlike($err, qr/ERROR/, 'victim: no error') or diag $err;
	my ($policy, $median, $max) = split /\|/, $out;
	return ($policy, $median, $max, $after - $before);
}

my ($p0, $med0, $max0, $c0) = victim_run();
note sprintf('victim alone: %d policy answers, median %.2f ms, max %.2f ms',
	$p0, $med0, $max0);
is($p0 + $c0, 0, 'victim alone: no policy answer');

# The attackers: the worst accepted call of each entry point, on fresh
# keys, with one-second windows so that what they store expires.
my $rules = 'ARRAY['
  . join(', ',
	map { "('sliding_log', 100000, '" . $_ . " seconds')::rl_rule" } 1 .. 16)
  . ']';
my %atk = (
	ordinary => "SELECT allowed FROM rl_allow('ord:' || :k % 1000, 'fixed_window', 1000000, "
	  . "'1 hour');",
	allow => "SELECT allowed FROM rl_allow('atk:' || :k, 'sliding_log', 100000, "
	  . "'1 second', 100000);",
	layered => "SELECT allowed FROM rl_allow_layered('atkl:' || :k, $rules, $log_cost);",
	many => "SELECT count(*) FROM rl_allow_many(ARRAY(SELECT 'atkm:' || :k || ':' || g "
	  . "FROM generate_series(1, 1000) g), 'sliding_log', 100000, '1 second', $log_cost);",
	stmt => "BEGIN;\nINSERT INTO atk_stmt SELECT :k::bigint * 10000 + g FROM generate_series(1, 10000) g;\n"
	  . "ROLLBACK;");
my %file;
for my $name (sort keys %atk)
{
	$file{$name} = $node->basedir . "/atk_$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file{$name},
		"\\set k random(1, 1000000000)\n$atk{$name}\n");
}

# Six pgbench sessions send the given scripts (name => weight) for a few
# seconds while the victim makes its calls.
sub attack
{
	my ($label, %weight) = @_;
	my @files = map { ('-f', "$file{$_}\@$weight{$_}") } sort keys %weight;
	# Redis logs the commands a script runs too: keep only those of 0.5 ms
	# or more, so that the log holds every long script of the run.
	$redis->cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 500);
	$redis->cmd('SLOWLOG', 'RESET');
	$redis->cmd('CONFIG', 'RESETSTAT');
	my $secs = 6;
	my ($bout, $berr) = ('', '');
	my $bench;
	my $t0 = time;
	{
		local $ENV{PGOPTIONS} = '-c ratelimit.command_timeout=60000';
		$bench = IPC::Run::start [
			'pgbench', '-n', '-c', 6, '-j', 2, '-T', $secs, @files,
			'-h', $node->host, '-p', $node->port, 'postgres'
		  ],
		  '<', \undef, '>', \$bout, '2>', \$berr;
	}
	usleep(1_000_000);
	my ($p1, $med1, $max1, $c1) = victim_run();
	$bench->finish;
	my $elapsed = time - $t0;
	my ($tx) = $bout =~ /actually processed: (\d+)/;
	note "attackers ($label): pgbench -c 6 -T $secs, $tx transactions";
	note $berr if $berr =~ /ERROR/;

	my $log = $redis->cmd('SLOWLOG', 'GET', -1);
	my $attack_max = 0;
	for my $e (@$log)
	{
		$attack_max = $e->[2]
		  if $e->[2] > $attack_max && uc($e->[3][0]) =~ /^(EVAL|FCALL)/;
	}
	my @top = sort { $b->[2] <=> $a->[2] } @$log;
	note sprintf('longest commands meanwhile: %s (%d in the log)',
		join('; ', map { ms($_->[2]) . ' ' . join(' ', @{ $_->[3] }[ 0 .. 3 ]) }
			  grep { defined } @top[ 0 .. 2 ]),
		scalar(@$log));
	my $evalsha = $redis->cmdstat('fcall');
	$evalsha = $redis->cmdstat('evalsha') unless $evalsha->{calls};
	my $busy = ($evalsha->{usec} // 0) / ($elapsed * 1e6);
	note sprintf('victim beside %s: %d policy answers (%d counted), median %.2f ms, '
		  . 'max %.2f ms; longest script meanwhile %s; scripts %d calls, %s us per call; '
		  . 'Redis ran scripts %.0f %% of the time',
		$label, $p1, $c1, $med1, $max1, ms($attack_max), $evalsha->{calls},
		$evalsha->{usec_per_call} // '?', $busy * 100);
	is($p1, 0, "victim beside $label: no policy answer (remaining never unknown)");
	is($c1, 0, "victim beside $label: rl_status counts no fail-open or fail-closed answer");
	ok($tx > 0, "attackers ($label) ran ($tx transactions)");
	fact('figure.011', sprintf('victim: 100 calls beside 6 sessions sending %s: '
		  . '%d policy answers; median %.2f ms (alone %.2f, x%.1f), max %.2f ms (alone %.2f, x%.1f); '
		  . 'longest script meanwhile %s; Redis ran scripts %.0f %% of the time',
		$label, $c1, $med1, $med0, $med1 / ($med0 || 1), $max1, $max0,
		$max1 / ($max0 || 1), ms($attack_max), $busy * 100));
}

# rl_allow_many at its largest, 100 000 keys: what a round trip builds is
# freed after it, so the backend's peak memory grows by little more than
# the call's arguments and answers (0.1.0 rose from 17 MB to 103 MB).
{
	my $m = rl_session($node);
	my ($mpid) = rl_run($m, 'SELECT pg_backend_pid()');
	# The backend's peak resident memory so far (VmHWM), in MB.
	my $rss = sub {
		open my $fh, '<', "/proc/$mpid/status" or return undef;
		my ($kb) = join('', <$fh>) =~ /^VmHWM:\s+(\d+) kB/m;
		return $kb / 1024;
	};
	rl_run($m, "SELECT count(*) FROM rl_allow_many(ARRAY['warm'], 'gcra', 5, '1 minute')");
	my $before = $rss->();
	my ($out) = rl_run($m,
		"SELECT count(*) FILTER (WHERE allowed) FROM rl_allow_many("
		  . "ARRAY(SELECT 'mem:' || g FROM generate_series(1, 100000) g), "
		  . "'token_bucket', 5, '1 minute')");
	my $after = $rss->();
	is($out, '100000', 'rl_allow_many with 100 000 keys: every key answered');
	my $grew = $after - $before;
	cmp_ok($grew, '<', 32,
		sprintf('rl_allow_many with 100 000 keys: the backend peaked %.1f MB higher (%.1f MB before)',
			$grew, $before));
	fact('figure.011', sprintf('memory: rl_allow_many with 100 000 keys raised the backend\'s peak by %.1f MB (%.1f MB to %.1f MB)',
		$grew, $before, $after));
	$m->quit;
}

# For comparison: as many sessions sending ordinary calls as fast as
# they can.
attack('ordinary rl_allow calls (fixed_window, cost 1)', ordinary => 1);
attack('statement triggers (10000 keys), rl_allow_many (1000 keys) and rl_allow_layered (16 rules)',
	stmt => 4, many => 1, layered => 1);
attack('those and rl_allow sliding_log of cost 100000',
	allow => 3, stmt => 1, many => 1, layered => 1);

$_->quit for ($s, $v);
$node->stop;
done_testing();
