# test/t/020_acquire.pl
#
# rl_acquire under concurrency, with the real clock:
#   1. eight sessions loop rl_acquire on one token bucket of 5 per second:
#      every call is admitted within max_wait, and no more calls are
#      admitted by any moment than the bucket allows (5 at once plus 5 a
#      second since the start); the waits are reported;
#   2. four such waiters and a newcomer polling with rl_allow share a key:
#      the shares are reported (waiters are not queued; README);
#   3. pg_cancel_backend and statement_timeout end a waiting rl_acquire
#      promptly, and the session works afterwards;
#   4. a denial whose wait exceeds max_wait is returned at once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_extension fact);

my $redis = RLRedis->new(name => 'r020');
my $node = rl_node('c020', $redis, qq{
ratelimit.command_timeout = 2000
});

# One session's loop: n acquisitions, each with the time before and after
# (seconds since the epoch, from the server's clock).
$node->safe_psql('postgres', q{
CREATE FUNCTION acquire_loop(key text, n int, max_wait interval)
RETURNS TABLE(i int, allowed boolean, t0 float8, t1 float8)
LANGUAGE plpgsql AS $$
BEGIN
	FOR k IN 1 .. n LOOP
		i := k;
		t0 := extract(epoch FROM clock_timestamp());
		SELECT r.allowed INTO allowed
		FROM rl_acquire(key, 'token_bucket', 5, '1 second', 1, max_wait) r;
		t1 := extract(epoch FROM clock_timestamp());
		RETURN NEXT;
	END LOOP;
END
$$;
CREATE FUNCTION poll_loop(key text, seconds float8)
RETURNS TABLE(admitted int, t1 float8[])
LANGUAGE plpgsql AS $$
DECLARE
	stop float8 := extract(epoch FROM clock_timestamp()) + seconds;
BEGIN
	admitted := 0;
	t1 := '{}';
	WHILE extract(epoch FROM clock_timestamp()) < stop LOOP
		IF (rl_allow(key, 'token_bucket', 5, '1 second')).allowed THEN
			admitted := admitted + 1;
			t1 := t1 || extract(epoch FROM clock_timestamp());
		END IF;
		PERFORM pg_sleep(0.02);
	END LOOP;
	RETURN NEXT;
END
$$;
});

my $mon = rl_session($node);

sub pct
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	return $v[ int($p * $#v + 0.5) ];
}

# The exact bound of a token bucket of capacity B refilled at rate per
# second, full at $start: by any moment x, at most B + rate x (x - start)
# calls are admitted.  An admission happens in Redis before the session
# reads the clock (t1), so counting by t1 can only undercount.
sub over_pace
{
	my ($start, $B, $rate, @t1) = @_;
	my $k = 0;
	for my $t (sort { $a <=> $b } @t1)
	{
		$k++;
		return "admission $k at +" . sprintf('%.3f', $t - $start) . ' s'
		  if $k > $B + $rate * ($t - $start) + 1e-6;
	}
	return '';
}

# ---------------------------------------------------------------------
# 1. Eight waiters, five calls each: 40 admissions, 5 at once and then 5
# a second, so about 7 s.
my ($N, $M) = (8, 5);
my @s = map { rl_session($node) } 1 .. $N;
rl_run($mon, "SELECT rl_reset('acquire:fair', 'token_bucket', 5, '1 second')");
my ($start) = rl_run($mon, 'SELECT extract(epoch FROM clock_timestamp())');
rl_start($_, "SELECT i, allowed, t0, t1 FROM acquire_loop('acquire:fair', $M, '10 s')")
  for @s;
my (@waits, @t1, @session_time);
my $all_in = 1;
for my $i (0 .. $#s)
{
	my ($out, $err) = rl_finish($s[$i]);
	my @rows = grep { /\|/ } split /\n/, $out;
	$all_in = 0, diag "session $i: $err" if $err ne '' || @rows != $M;
	my ($first, $last);
	for (@rows)
	{
		my ($k, $ok, $t0, $t1) = split /\|/;
		$all_in = 0, diag "session $i: call $k denied" unless $ok eq 't';
		push @waits, $t1 - $t0;
		push @t1, $t1;
		$first //= $t0;
		$last = $t1;
	}
	push @session_time, $last - $first if defined $last;
}
ok($all_in, "$N sessions x $M rl_acquire: every call admitted within max_wait 10 s");
is(over_pace($start, 5, 5, @t1), '',
	'no more admitted by any moment than 5 + 5/s since the start');
my $span = (sort { $b <=> $a } @t1)[0] - $start;
my $fig = sprintf('%d waiters x %d calls on 5/s: all in %.2f s (ideal %.1f s); '
	  . 'wait per call p50 %.0f ms, p90 %.0f ms, max %.0f ms; slowest session %.2f s',
	$N, $M, $span, ($N * $M - 5) / 5, 1000 * pct(0.5, @waits),
	1000 * pct(0.9, @waits), 1000 * pct(1, @waits), (sort { $b <=> $a } @session_time)[0]);
note $fig;
fact('figure.020', $fig);

# ---------------------------------------------------------------------
# 2. A newcomer polling every 20 ms with rl_allow beside four waiters:
# who gets the units (no queue: whoever asks first when one frees).
rl_run($mon, "SELECT rl_reset('acquire:barge', 'token_bucket', 5, '1 second')");
($start) = rl_run($mon, 'SELECT extract(epoch FROM clock_timestamp())');
rl_start($s[$_], "SELECT i, allowed, t0, t1 FROM acquire_loop('acquire:barge', 5, '20 s')")
  for 0 .. 3;
rl_start($s[4], "SELECT admitted, t1 FROM poll_loop('acquire:barge', 3.0)");
my ($waiter_in, $waiter_out, @bt1) = (0, 0);
for my $i (0 .. 3)
{
	my ($out) = rl_finish($s[$i]);
	for (grep { /\|/ } split /\n/, $out)
	{
		my (undef, $ok, undef, $t1) = split /\|/;
		$ok eq 't' ? $waiter_in++ : $waiter_out++;
		push @bt1, $t1 if $ok eq 't';
	}
}
my ($pout) = rl_finish($s[4]);
my ($polled, $ptimes) = split /\|/, $pout;
push @bt1, $ptimes =~ /([\d.]+)/g;
is($waiter_in + $waiter_out, 20, 'beside a poller: the four waiters made 20 calls');
is(over_pace($start, 5, 5, @bt1), '',
	'beside a poller: no more admitted by any moment than 5 + 5/s');
$fig = sprintf('4 waiters x 5 calls and a poller (rl_allow every 20 ms, 3 s) on 5/s: '
	  . 'waiters admitted %d of 20, poller %d', $waiter_in, $polled // 0);
note $fig;
fact('figure.020', $fig);

# ---------------------------------------------------------------------
# 3. Cancel and statement_timeout end a wait of about 30 s.
my $w = $s[5];
rl_run($w, "SELECT rl_reset('acquire:cancel', 'token_bucket', 1, '30 s')");
my $slow = "SELECT * FROM rl_acquire('acquire:cancel', 'token_bucket', 1, '30 s', max_wait => '40 s')";
my ($first) = rl_run($w, $slow);
like($first, qr/^t\|0\|0\|/, 'the first call takes the only unit');
my ($wpid) = rl_run($w, 'SELECT pg_backend_pid()');
rl_start($w, $slow);
ok(defined rl_wait_extension($mon, $wpid), 'the second call waits (wait_event Extension)');
my $t0 = time;
rl_run($mon, "SELECT pg_cancel_backend($wpid)");
my ($out, $err) = rl_finish($w);
my $t = time - $t0;
like($err, qr/57014: canceling statement due to user request/, 'pg_cancel_backend: ERROR 57014');
ok($t < 5, sprintf('pg_cancel_backend ended the wait in %.3f s', $t));
fact('figure.020', sprintf('pg_cancel_backend ended a 30 s rl_acquire wait in %.0f ms', 1000 * $t));

rl_run($w, "SET statement_timeout = '300ms'");
($out, $err, $t) = rl_run($w, $slow);
like($err, qr/57014: canceling statement due to statement timeout/,
	'statement_timeout: ERROR 57014');
ok($t >= 0.25 && $t < 5, sprintf('statement_timeout 300 ms ended the wait after %.3f s', $t));
rl_run($w, 'RESET statement_timeout');
($out) = rl_run($w, "SELECT allowed FROM rl_allow('acquire:after', 'gcra', 5, '1 s')");
is($out, 't', 'the session works after both');

# ---------------------------------------------------------------------
# 4. A wait longer than max_wait: the denial, at once.
($out, $err, $t) = rl_run($w,
	"SELECT * FROM rl_acquire('acquire:cancel', 'token_bucket', 1, '30 s', max_wait => '2 s')");
like($out, qr/^f\|0\|(\d+)\|/, 'max_wait 2 s on a 30 s wait: denied');
my ($retry) = $out =~ /^f\|0\|(\d+)\|/;
ok(defined $retry && $retry > 2000, "the denial tells the wait (retry_after_ms $retry)");
ok($t < 1, sprintf('returned at once (%.3f s)', $t));

$_->quit for @s, $mon;
$node->stop;
done_testing();
