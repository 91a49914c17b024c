# test/t/012_hostile_peer.pl
#
# A broken or hostile peer: test/perl/RLProxy.pm sits between the
# extension and a real redis-server and damages the reply to one chosen
# command: every kind the extension sends (the handshake's AUTH, SELECT,
# CLIENT SETNAME and INFO; FCALL, or EVALSHA without Functions, from
# rl_allow, rl_peek, a batch of rl_allow_many and the statement trigger's
# layered script; EVAL after NOSCRIPT, by a session whose Redis user has
# no Functions; rl_reset's DEL).  Faults: wrong types and nesting, nil,
# error replies, negative and huge lengths, non-numbers, garbage, replies
# for commands never sent (before or after the real one), truncation
# with a close or a stall, splitting into delayed pieces, delays within
# and past the timeout, a reordered pair, and a close before or instead
# of the reply.
#
# Every case must end in an ERROR or a policy answer, and, unless the
# damaged reply was itself one well-formed reply (a slow but whole reply,
# a BUSY), with the link dropped: the next call reconnects.  An error
# reply drops it too: it has no shape to check, so one put in front of a
# pipelined call's real reply leaves that reply to come late, after the
# next call's check for stray bytes (seen here: a batch then answered
# the next call with its own reply).
# Never a crash (the postmaster never restarts), a hang (every call
# returns within the timeouts plus a margin; a stalled one is
# cancellable), a leak (backend memory flat over hundreds of faulty
# calls) or another call's answer: after each fault a call through the
# now clean proxy gives exactly the answer the real Redis's state gives.
#   1. A table of named cases, fault kind x command kind.
#   2. Cancel, leak and crash checks.
#   3. A bounded random campaign (RL_FUZZ_CASES cases, default 200, or
#      60 s), seed printed; RL_FUZZ_SEED=<n> replays it.  It runs against
#      a second node that loads an AddressSanitizer build of the
#      extension, and no ASan report may be written; where that build is
#      impossible the campaign runs on the plain node and says why.

use strict;
use warnings;

use FindBin;
use IPC::Run;
use File::Copy qw(copy);
use File::Path qw(make_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLProxy;
use RLRedis qw(rl_node rl_session rl_run rl_start rl_finish fact fault_mark fault_done);

my $LIMIT = 100;
# Every call returns within connect_timeout + command_timeout; the
# margin is generous (a loaded CI machine), a hang is minutes.
my $TIMEOUT_MS = 200;
my $MARGIN = 3;

my $redis = RLRedis->new(name => 'r012');
$redis->cli('ACL', 'SETUSER', 'rl_peer', 'on', '>pw-peer', '~*', '+@all');
# The same without Functions: its sessions send EVALSHA, and EVAL after
# NOSCRIPT (the path of servers before Redis 7.0).
$redis->cli('ACL', 'SETUSER', 'rl_peer_nofn', 'on', '>pw-peer', '~*', '+@all',
	'-fcall', '-function');
# The script command the extension sends: FCALL on Redis 7.0 and later.
my $SCRIPT = (split /\./, $redis->version)[0] >= 7
  ? 'FCALL' : 'EVALSHA';
my $proxy = RLProxy->new($redis->port);

# Every connection's handshake has all four commands: AUTH (an ACL user),
# SELECT (database 1), CLIENT SETNAME and INFO.
my $node_conf = qq{
ratelimit.redis_username = 'rl_peer'
ratelimit.redis_password = 'pw-peer'
ratelimit.redis_db = 1
ratelimit.connect_timeout = $TIMEOUT_MS
ratelimit.command_timeout = $TIMEOUT_MS
ratelimit.retry_interval = 0
ratelimit.deny_cache = off
};
my $node = rl_node('c012', $proxy, $node_conf);
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
$node->safe_psql('postgres', q{
CREATE TABLE peer_t (k text);
CREATE TRIGGER peer_t_limit AFTER INSERT ON peer_t
	REFERENCING NEW TABLE AS rl_new FOR EACH STATEMENT
	EXECUTE FUNCTION rl_throttle_statement('k', 'fixed_window', '100', '1 hour');
});

# The real Redis, read directly (database 1): the count of the limiter
# (key, fixed_window, $LIMIT, 1 hour).
sub used
{
	my ($key) = @_;
	$redis->cmd('SELECT', 1);
	return $redis->fw_used("rl:{$dboid:$key}:fixed_window:$LIMIT:3600000ms") // 0;
}

sub session
{
	my ($n) = @_;
	my $s = rl_session($n);
	rl_run($s, 'SET ratelimit.test_clock_ms = 1800000000000');
	my ($pid) = rl_run($s, 'SELECT pg_backend_pid()');
	$s->{rl_pid} = $pid;
	return $s;
}

sub status
{
	my ($s) = @_;
	my ($out) = rl_run($s,
		'SELECT connected, fail_open + fail_closed, failures, connects FROM rl_status()');
	my %st;
	@st{qw(connected policy failures connects)} = split /\|/, $out // '';
	return \%st;
}

# The SQL of each command kind, on key k; the keys it charges.
my %KIND = (
	allow => sub { ("SELECT allowed, remaining FROM rl_allow('$_[0]', 'fixed_window', $LIMIT, '1 hour')", $_[0]) },
	peek => sub { ("SELECT allowed, remaining FROM rl_peek('$_[0]', 'fixed_window', $LIMIT, '1 hour')", $_[0]) },
	# A batch goes 64 keys to a script call: 192 keys make three calls of
	# one shape in one round trip (the second's reply can be swapped with
	# the third's, indistinguishably).
	many => sub {
		my $k = $_[0];
		("SELECT count(*) FILTER (WHERE allowed) || '/' || coalesce(min(remaining)::text, '-') "
			  . "FROM rl_allow_many(ARRAY(SELECT '$k:' || g FROM generate_series(1, 192) g), "
			  . "'fixed_window', $LIMIT, '1 hour')",
			map { "$k:$_" } 1 .. 192)
	},
	reset => sub { ("SELECT rl_reset('$_[0]', 'fixed_window', $LIMIT, '1 hour')", $_[0]) },
	trigger => sub { ("INSERT INTO peer_t VALUES ('$_[0]')", $_[0]) },
);

my $seq = 0;
my $pm_start = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

# Runs one case on session s: plan p against the call of kind `kind`.
# expect: a regex over the outcome (error, policy, redis); drop: 1 if the
# link must be gone (the next call on a new connection), 0 if it must be
# kept, undef if either is right.  Returns true if every check passed.
sub run_case
{
	my ($s, $proxy, $name, $kind, $plan, $expect, $drop, %opt) = @_;
	my $key = 'c' . ++$seq;
	my $ok = 1;
	my $check = sub {
		my ($cond, $what) = @_;
		$ok &&= $cond;
		return $cond if $opt{quiet};
		return ok($cond, "$name: $what");
	};

	# A key already used once, so a reset has something to delete.
	my ($setup_sql) = $KIND{allow}->($key);
	rl_run($s, $setup_sql) if $kind eq 'reset';
	if (($plan->{cmd} // '') =~ /^(AUTH|SELECT|CLIENT|INFO)$/)
	{
		$proxy->kick;			# the handshake happens on this call
	}
	$redis->cmd('SCRIPT', 'FLUSH') if ($plan->{cmd} // '') eq 'EVAL';
	my $before = status($s);
	my $conns = $proxy->status->{conns};
	$proxy->plan(%$plan);
	my ($sql, @keys) = $KIND{$kind}->($key);
	my ($out, $err, $t) = rl_run($s, $sql);
	my $pst = $proxy->status;
	$proxy->clear;
	my $after = status($s);

	$check->($pst->{fired}, 'the fault was staged (the command was sent)');
	my $outcome =
	    $err =~ /ERROR:/ ? 'error'
	  : ($after->{policy} // 0) > ($before->{policy} // 0) ? 'policy'
	  : 'redis';
	$check->($outcome =~ $expect, "outcome $outcome");
	$check->($t < ($opt{timeout_s} // 2 * $TIMEOUT_MS / 1000) + $MARGIN,
		sprintf('returned in %.0f ms', $t * 1000));
	$check->($err !~ /server closed the connection|terminated|PANIC|FATAL/,
		'the backend survived') or diag $err;

	# A clean call on every key the faulty call may have charged: exactly
	# what the real Redis holds.
	my @want = map { my $n = used($_); $n < $LIMIT ? "t|" . ($LIMIT - $n - 1) : "f|0" } @keys;
	my ($oracle) = rl_run($s,
		"SELECT string_agg(r.allowed::text::char || '|' || r.remaining, ',' ORDER BY o) "
		  . "FROM unnest(ARRAY['" . join("', '", @keys) . "']) WITH ORDINALITY u(k, o), "
		  . "LATERAL rl_allow(k, 'fixed_window', $LIMIT, '1 hour') r");
	$check->(($oracle // '') eq join(',', @want),
		"then a clean call gets the real Redis's answer ($oracle)");
	my $pst2 = $proxy->status;
	if (defined $drop)
	{
		my $reconnected = $pst2->{conns} > ($plan->{cmd} =~ /^(AUTH|SELECT|CLIENT|INFO)$/ ? $pst->{conns} : $conns);
		$check->($reconnected == $drop,
			$drop ? 'the link was dropped (the next call reconnected)' : 'the link was kept');
	}
	if (!$ok)
	{
		diag "$name: plan " . RLProxy::describe(%$plan) . " on $kind: outcome $outcome, out '$out', err '$err'";
	}
	return $ok;
}

my $s = session($node);
is((rl_run($s, ($KIND{allow}->('warm'))[0]))[0], "t|99", 'warm-up call answered through the proxy');
like(join(',', @{ $proxy->status->{cmds} }),
	qr/^AUTH,SELECT,CLIENT,INFO,(FCALL(,FUNCTION,FCALL)?|EVALSHA(,EVAL)?)$/,
	"a connection: AUTH, SELECT, CLIENT SETNAME, INFO in the handshake, then $SCRIPT");
like(join(',', @{ $proxy->status->{cmds} }), qr/,\Q$SCRIPT\E/, "the script call is $SCRIPT");

# A session whose user may not use Functions: EVALSHA, EVAL after NOSCRIPT.
my $se = session($node);
rl_run($se, "SET ratelimit.redis_username = 'rl_peer_nofn'");
is((rl_run($se, ($KIND{allow}->('warm_nofn'))[0]))[0], "t|99",
	'warm-up call of the session without Functions');
is((rl_run($se, ($KIND{allow}->('warm_nofn'))[0]))[0], "t|98",
	'without Functions: answered');
like(join(',', @{ $proxy->status->{cmds} }),
	qr/^AUTH,SELECT,CLIENT,INFO,(FCALL,)?EVAL(SHA)?,EVALSHA$/,
	'without Functions: FCALL refused once, then EVALSHA');

# Replies that are wrong for a script call, by kind of damage.
my $fat = 'x' x 40000;
my %BAD = (
	garbage => "\x00\xffgarbage\r\n",
	int => ":7\r\n",
	nested => "*4\r\n*1\r\n:1\r\n*0\r\n*-1\r\n\$-1\r\n",
	nil => "\$-1\r\n",
	nil_array => "*-1\r\n",
	error => "-ERR injected by the proxy\r\n",
	neg_bulk => "\$-5\r\n",
	neg_array => "*-5\r\n",
	huge_array => "*999999999\r\n",
	huge_bulk => "\$4294967296\r\n",
	nonnum => ":abc\r\n",
	nonnum_in_array => "*4\r\n:1\r\n:x9\r\n:0\r\n:0\r\n",
	strings => "*4\r\n\$1\r\n1\r\n\$2\r\n99\r\n:0\r\n:0\r\n",
	short => "*3\r\n:1\r\n:9\r\n:0\r\n",
	status => "+OK\r\n",
	deep => ("*1\r\n" x 9) . ":1\r\n",
	fake => "*4\r\n:1\r\n:42\r\n:0\r\n:0\r\n",
);

my @E = (qr/^error$/, 1);			# ERROR, link dropped
my @P = (qr/^policy$/, 1);			# policy answer, link dropped
my @R = (qr/^redis$/, 0);			# a whole (slow) reply: Redis's answer
my @named;

# 1. The script call of rl_allow (FCALL, or EVALSHA before Redis 7.0): every fault.
my %script = (
	garbage => [ { fault => 'replace', data => $BAD{garbage} }, @P ],
	int_for_array => [ { fault => 'replace', data => $BAD{int} }, @E ],
	nested => [ { fault => 'replace', data => $BAD{nested} }, @E ],
	nil => [ { fault => 'replace', data => $BAD{nil} }, @E ],
	nil_array => [ { fault => 'replace', data => $BAD{nil_array} }, @E ],
	error_reply => [ { fault => 'replace', data => $BAD{error} }, @E ],
	busy_reply => [ { fault => 'replace', data => "-BUSY injected\r\n" }, qr/^policy$/, 0 ],
	negative_bulk_length => [ { fault => 'replace', data => $BAD{neg_bulk} }, @P ],
	negative_array_length => [ { fault => 'replace', data => $BAD{neg_array} }, @P ],
	huge_array_length => [ { fault => 'replace', data => $BAD{huge_array} }, @P ],
	huge_bulk_length => [ { fault => 'replace', data => $BAD{huge_bulk} }, @P ],
	non_number => [ { fault => 'replace', data => $BAD{nonnum} }, @P ],
	non_number_in_array => [ { fault => 'replace', data => $BAD{nonnum_in_array} }, @P ],
	strings_for_numbers => [ { fault => 'replace', data => $BAD{strings} }, @E ],
	short_array => [ { fault => 'replace', data => $BAD{short} }, @E ],
	status_for_array => [ { fault => 'replace', data => $BAD{status} }, @E ],
	nesting_too_deep => [ { fault => 'replace', data => $BAD{deep} }, @P ],
	extra_reply_after => [ { fault => 'after', data => ":1\r\n" }, @P ],
	extra_reply_before => [ { fault => 'before', data => $BAD{fake} }, @P ],
	extra_error_before => [ { fault => 'before', data => $BAD{error} }, @P ],
	truncated_then_close => [ { fault => 'truncate', then => 'close' }, @P ],
	truncated_then_stall => [ { fault => 'truncate', then => 'stall' }, @P ],
	split_bytewise => [ { fault => 'split', n => 1, ms => 1 }, @R ],
	split_too_slow => [ { fault => 'split', n => 1, ms => 40 }, @P ],
	delayed_within_timeout => [ { fault => 'delay', ms => 50 }, @R ],
	delayed_past_timeout => [ { fault => 'delay', ms => 600 }, @P ],
	closed_instead_of_reply => [ { fault => 'close' }, @P ],
	closed_before_redis_saw_it => [ { fault => 'closereq' }, @P ],
	never_answered => [ { fault => 'drop' }, @P ],
	swapped_with_a_reply_never_coming => [ { fault => 'swap' }, @P ],
);
push @named, map { [ "$SCRIPT (rl_allow): $_", 'allow', { cmd => $SCRIPT, %{ $script{$_}[0] } },
	@{ $script{$_} }[ 1, 2 ] ] } sort keys %script;

# 2. The other command kinds, with the faults that tell them apart.
for my $c (
	[ 'peek', $SCRIPT, 1, [qw(int_for_array extra_reply_after split_too_slow garbage)] ],
	[ 'many', $SCRIPT, 2, [qw(garbage int_for_array extra_reply_after truncated_then_close
		delayed_past_timeout error_reply closed_before_redis_saw_it extra_reply_before nested)] ],
	[ 'allow', 'EVAL', 1, [qw(garbage nil extra_reply_after truncated_then_stall error_reply
		huge_array_length split_bytewise)] ],
	[ 'trigger', $SCRIPT, 1, [qw(garbage nested extra_reply_before closed_instead_of_reply
		short_array)] ])
{
	my ($kind, $cmd, $nth, $faults) = @$c;
	for my $f (@$faults)
	{
		my ($p, $expect, $drop) = @{ $script{$f} };
		push @named, [ "$cmd #$nth ($kind): $f", $kind, { cmd => $cmd, nth => $nth, %$p }, $expect, $drop ];
	}
}

# A batch whose replies come back swapped: two whole script answers,
# indistinguishable on the wire (see README); what must hold is that the
# stream stays in step.
push @named, [ "$SCRIPT #2 (many): swapped with the next reply", 'many',
	{ cmd => $SCRIPT, nth => 2, fault => 'swap' }, qr/^redis$/, 0 ];

# rl_reset's DEL: administrative, so an ERROR whatever the policy.
push @named,
  [ 'DEL (rl_reset): garbage', 'reset', { cmd => 'DEL', fault => 'replace', data => $BAD{garbage} }, @E ],
  [ 'DEL (rl_reset): array for an integer', 'reset', { cmd => 'DEL', fault => 'replace', data => "*1\r\n:1\r\n" }, @E ],
  [ 'DEL (rl_reset): extra reply after', 'reset', { cmd => 'DEL', fault => 'after', data => ":1\r\n" }, @E ],
  [ 'DEL (rl_reset): closed instead of reply', 'reset', { cmd => 'DEL', fault => 'close' }, @E ],
  [ 'DEL (rl_reset): error reply', 'reset', { cmd => 'DEL', fault => 'replace', data => $BAD{error} }, @E ],
  [ 'DEL (rl_reset): truncated then stall', 'reset', { cmd => 'DEL', fault => 'truncate', then => 'stall' }, @E ];

# 3. The handshake: any damage there is an outage (policy answer) on a
# connection that is given up.
for my $c (
	[ 'AUTH', [ garbage => { fault => 'replace', data => $BAD{garbage} } ],
		[ int => { fault => 'replace', data => $BAD{int} } ],
		[ error => { fault => 'replace', data => $BAD{error} } ],
		[ extra_reply_after => { fault => 'after', data => "+OK\r\n" } ],
		[ closed_instead_of_reply => { fault => 'close' } ],
		[ delayed_past_timeout => { fault => 'delay', ms => 600 } ],
		[ truncated_then_stall => { fault => 'truncate', then => 'stall' } ] ],
	[ 'SELECT', [ nil => { fault => 'replace', data => $BAD{nil} } ],
		[ error => { fault => 'replace', data => $BAD{error} } ],
		[ extra_reply_before => { fault => 'before', data => "+OK\r\n" } ],
		[ array => { fault => 'replace', data => $BAD{fake} } ] ],
	[ 'CLIENT', [ nested => { fault => 'replace', data => $BAD{nested} } ],
		[ swapped_with_INFO => { fault => 'swap' } ],
		[ truncated_then_close => { fault => 'truncate', then => 'close' } ],
		[ huge_array_length => { fault => 'replace', data => $BAD{huge_array} } ] ],
	[ 'INFO', [ int => { fault => 'replace', data => $BAD{int} } ],
		[ huge_bulk_length => { fault => 'replace', data => $BAD{huge_bulk} } ],
		[ extra_reply_after => { fault => 'after', data => "+OK\r\n" } ],
		[ closed_instead_of_reply => { fault => 'close' } ],
		[ status => { fault => 'replace', data => $BAD{status} } ],
		[ split_bytewise => { fault => 'split', n => 7, ms => 1 } ] ])
{
	my ($cmd, @faults) = @$c;
	for my $f (@faults)
	{
		my ($fname, $p) = @$f;
		my @expect = $fname eq 'split_bytewise' ? @R : @P;
		push @named, [ "$cmd (handshake): $fname", 'allow', { cmd => $cmd, %$p }, @expect,
			timeout_s => 2 * $TIMEOUT_MS / 1000 ];
	}
}

# The failure policy decides what a protocol fault answers.
for my $mode ([ 'closed', qr/^policy$/ ], [ 'error', qr/^error$/ ])
{
	push @named, [ "$SCRIPT (rl_allow), failure_mode $mode->[0]: garbage", 'allow',
		{ cmd => $SCRIPT, fault => 'replace', data => $BAD{garbage} }, $mode->[1], 1,
		mode => $mode->[0] ];
}

for my $case (@named)
{
	my ($name, $kind, $plan, $expect, $drop, %opt) = @$case;
	my $mark = fault_mark();
	rl_run($s, "SET ratelimit.failure_mode = $opt{mode}") if $opt{mode};
	# EVAL comes only where Functions are not used.
	run_case($plan->{cmd} eq 'EVAL' ? $se : $s, $proxy, $name, $kind, $plan,
		$expect, $drop, %opt);
	rl_run($s, 'RESET ratelimit.failure_mode') if $opt{mode};
	fault_done("hostile peer: $name", $mark);
}
note scalar(@named) . ' named cases';

# 4. A reply that never comes, under a long command_timeout: the call is
# cancellable, and the link is not reused.
my $mark = fault_mark();
{
	rl_run($s, 'SET ratelimit.command_timeout = 60000');
	my $before = $proxy->status->{conns};
	$proxy->plan(cmd => $SCRIPT, fault => 'drop');
	rl_start($s, ($KIND{allow}->('cancel'))[0]);
	ok(defined RLRedis::rl_wait_for(sub { $proxy->status->{fired} }, 10), 'cancel: the call is waiting');
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($s->{rl_pid})");
	my ($out, $err) = rl_finish($s);
	my $t = time - $t0;
	$proxy->clear;
	like($err, qr/ERROR:  57014/, 'cancel: ERROR 57014 (canceling statement)');
	ok($t < $MARGIN, sprintf('cancel: returned %.0f ms after pg_cancel_backend', $t * 1000));
	rl_run($s, 'RESET ratelimit.command_timeout');
	my $n = used('cancel');
	is((rl_run($s, ($KIND{allow}->('cancel'))[0]))[0], 't|' . ($LIMIT - $n - 1),
		'cancel: then the real Redis\'s answer, on a new link');
	ok($proxy->status->{conns} > $before, 'cancel: the next call reconnected');
}
fault_done('hostile peer: a reply that never comes, cancelled', $mark);

# 5. Leaks: hundreds of faulty calls whose replies are large (40 kB), by
# every path that frees them: a wrong shape (ERROR), an error reply, an
# extra reply, a cut-short one.  A leaked reply per call would be
# megabytes.
$mark = fault_mark();
{
	my %leaky = (
		wrong_shape => { fault => 'replace', data => "*4\r\n\$40000\r\n$fat\r\n:1\r\n:1\r\n:1\r\n" },
		error_reply => { fault => 'replace', data => "-ERR $fat\r\n" },
		extra_reply => { fault => 'after', data => "\$40000\r\n$fat\r\n" },
		cut_short => { fault => 'replace', data => "*4\r\n\$40000\r\n$fat\r\n:1\r\n", then => 'close' },
	);
	my $rss = sub {
		open my $fh, '<', "/proc/$s->{rl_pid}/status" or return 0;
		my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+)/m;
		return $kb;
	};
	my $ctx = sub { (rl_run($s, 'SELECT sum(total_bytes) FROM pg_backend_memory_contexts'))[0] };
	my $loop = sub {
		my ($n) = @_;
		for my $f (sort keys %leaky)
		{
			$proxy->plan(cmd => $SCRIPT, repeat => 1, %{ $leaky{$f} });
			rl_run($s, qq{DO \$\$ BEGIN FOR i IN 1..$n LOOP BEGIN
				PERFORM rl_allow('leak', 'fixed_window', 1000000, '1 hour');
				EXCEPTION WHEN others THEN NULL; END; END LOOP; END \$\$});
			$proxy->clear;
		}
	};
	rl_run($s, 'SET client_min_messages = error');
	$loop->(20);
	my ($rss0, $ctx0) = ($rss->(), $ctx->());
	$loop->(100);
	my ($rss1, $ctx1) = ($rss->(), $ctx->());
	rl_run($s, 'RESET client_min_messages');
	note "leak check: VmRSS $rss0 -> $rss1 kB, memory contexts $ctx0 -> $ctx1 bytes over 400 faulty calls";
	ok($rss1 - $rss0 < 4096, "leak: backend RSS grew by less than 4 MB over 400 faulty calls ($rss0 -> $rss1 kB)");
	ok($ctx1 - $ctx0 < 1024 * 1024, "leak: memory contexts grew by less than 1 MB ($ctx0 -> $ctx1)");
	fact('figure.012', sprintf('hostile peer: backend VmRSS %d -> %d kB over 400 faulty calls with 40 kB replies', $rss0, $rss1));
}
fault_done('hostile peer: 400 faulty calls with large replies, no leak', $mark);

# 6. The random campaign: on the AddressSanitizer node when it can be
# built, else on this one.  An ASan node that dies without an
# AddressSanitizer error (the runtime cannot live in this process, not a
# defect found) hands the campaign to the plain node, and the summary
# says why; an AddressSanitizer error is a failure, its report printed.
my ($asan_node, $asan_dir, $asan_why) = asan_node();
my ($cs, $asan_pm_start);
if ($asan_node)
{
	eval {
		$cs = session($asan_node);
		$asan_pm_start = $asan_node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
		1;
	} or ($asan_node, $asan_why) = (undef, asan_gone('no session could start', $@));
}
note $asan_node ? 'campaign under AddressSanitizer' : "no AddressSanitizer: $asan_why";
my $cases = $ENV{RL_FUZZ_CASES} // 200;
my $seed = $ENV{RL_FUZZ_SEED} // (int(time() * 1000) ^ $$) % 2**31;
note "seed $seed (RL_FUZZ_SEED=$seed replays this campaign)";
diag "012_hostile_peer: seed $seed" if $ENV{RL_FUZZ_SEED};
$mark = fault_mark();
{
	my ($done, $failed) = campaign($asan_node ? $cs : $s, $proxy, $cases, $seed);
	if ($asan_node && !asan_alive())
	{
		$asan_why = asan_gone('the server died during the campaign', '');
		($asan_node, $cs) = (undef, undef);
		($done, $failed) = campaign($s, $proxy, $cases, $seed);
	}
	is($failed, 0, "random campaign: $done cases, every one ended in an ERROR or a policy answer, "
		  . "within the timeouts, then the real Redis's answer");
	fact('figure.012', "hostile peer: random campaign of $done cases (seed $seed)"
		  . ($asan_node ? ', under AddressSanitizer (its runtime loaded with the library: '
			  . 'the extension\'s globals checked)' : ", without AddressSanitizer: $asan_why"));
}
fault_done('hostile peer: random campaign' . ($asan_node ? ' under AddressSanitizer' : ''), $mark);

# 7. No crash anywhere: the postmasters never restarted, no backend died
# of a signal, no ASan report.
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $pm_start,
	'the postmaster never restarted');
unlike(slurp_file($node->logfile), qr/terminated by signal|server process .* was terminated/,
	'no backend died of a signal');
SKIP:
{
	skip "AddressSanitizer build not possible: $asan_why", 4 unless $asan_node;
	is($asan_node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $asan_pm_start,
		'ASan node: the postmaster never restarted');
	like($asan_node->safe_psql('postgres', q{SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'}),
		qr{/ratelimit\.so$}, 'the campaign node loads the AddressSanitizer build');
	unlike(slurp_file($asan_node->logfile), qr/terminated by signal|AddressSanitizer/,
		'ASan node: no backend died, no sanitizer message in the log');
	my @reports = glob("$asan_dir/asan.*");
	is(scalar(@reports), 0, 'ASan node: no AddressSanitizer report written')
	  or diag map { slurp_file($_) } @reports[ 0 .. ($#reports < 2 ? $#reports : 2) ];
}

$cs->quit if $asan_node;
$s->quit;
$proxy->stop;
done_testing();

# The random campaign through $proxy on session $cs: $cases cases (at
# most 60 s) drawn from $seed.  Returns (cases run, cases failed).
sub campaign
{
	my ($cs, $proxy, $cases, $seed) = @_;
	srand($seed);
	my ($done, $failed) = (0, 0);
	my @bad = map { $BAD{$_} } sort keys %BAD;	# in a fixed order, for the seed
	push @bad, "*2147483647\r\n", "\$2147483647\r\n", "*-2\r\n", ":99999999999999999999\r\n",
	  "\r\n", "*4\r\n:1\r\n:1\r\n", "\$3\r\nab", "-\r\n", "+\r\n";
	my @targets = (
		[ 'allow', $SCRIPT, 1 ], [ 'peek', $SCRIPT, 1 ], [ 'many', $SCRIPT, 1 ],
		[ 'many', $SCRIPT, 2 ], [ 'many', $SCRIPT, 3 ], [ 'trigger', $SCRIPT, 1 ],
		[ 'reset', 'DEL', 1 ],
		# EVAL after NOSCRIPT only where Functions are not used.
		($SCRIPT eq 'EVALSHA' ? ([ 'allow', 'EVAL', 1 ], [ 'many', 'EVAL', 2 ]) : ()),
		[ 'allow', 'AUTH', 1 ], [ 'allow', 'SELECT', 1 ], [ 'allow', 'CLIENT', 1 ],
		[ 'allow', 'INFO', 1 ]);
	my $t0 = time;
	for my $i (1 .. $cases)
	{
		last if time - $t0 > 60;
		my ($kind, $cmd, $nth) = @{ $targets[ int rand @targets ] };
		my $f = (qw(replace replace replace before after truncate truncate split split delay
			flip flip close closereq drop swap))[ int rand 16 ];
		my %p = (cmd => $cmd, nth => $nth, fault => $f);
		my $junk = $bad[ int rand @bad ];
		$junk = join '', map { chr int rand 256 } 1 .. 1 + int rand 12 if rand() < 0.2;
		$p{data} = $junk if $f =~ /^(replace|before|after)$/;
		$p{n} = int rand 40 if $f =~ /^(truncate|flip)$/;
		$p{then} = rand() < 0.5 ? 'close' : 'stall' if $f eq 'truncate';
		$p{mask} = 1 + int rand 255 if $f eq 'flip';
		($p{n}, $p{ms}) = (1 + int rand 8, int rand 30) if $f eq 'split';
		$p{ms} = int rand 500 if $f eq 'delay';
		# What a sound client must do: any damage that leaves one whole
		# reply of the wrong kind, or the stream out of step, is an ERROR
		# or a policy answer; a reply that is only slow, or corrupted into
		# another well-formed one, may be Redis's answer.
		my $expect = ($f =~ /^(split|delay|flip|swap)$/) ? qr/^(error|policy|redis)$/ : qr/^(error|policy)$/;
		$expect = qr/^(error|policy|redis)$/ if $kind eq 'reset' || $cmd =~ /^(CLIENT|INFO)$/;
		$expect = qr/^(error|policy|redis)$/ if $f eq 'replace' && $junk =~ /^[-+]/ && $cmd !~ /^(EVALSHA|EVAL|FCALL)$/;
		$expect = qr/^(error|policy|redis)$/ if $f eq 'replace' && $junk =~ /^:-?\d+\r\n$/ && $cmd eq 'DEL';
		my $drop = ($f =~ /^(before|after|truncate|close|closereq|drop)$/) ? 1 : undef;
		$drop = undef if $f eq 'drop' && $kind eq 'many' && $nth < 3;
		my $ok = eval { run_case($cs, $proxy, "fuzz $i", $kind, \%p, $expect, $drop, quiet => 1) };
		last if !defined $ok && $asan_node && !asan_alive();
		$done++;
		if (!$ok)
		{
			$failed++;
			diag "fuzz case $i failed (RL_FUZZ_SEED=$seed): " . RLProxy::describe(%p) . " on $kind";
		}
	}
	return ($done, $failed);
}

# Whether the AddressSanitizer node's postmaster still answers.
sub asan_alive
{
	return eval { $asan_node->safe_psql('postgres', 'SELECT 1') eq '1' };
}

# The AddressSanitizer node is gone: a report of an AddressSanitizer
# error fails the test and is printed; otherwise the node is stopped
# and the returned reason (with the last lines of its log) says why the
# campaign runs without it.
sub asan_gone
{
	my ($what, $err) = @_;
	my @errors = grep { slurp_file($_) =~ /ERROR: AddressSanitizer/ } glob("$asan_dir/asan.*");
	ok(!@errors, "AddressSanitizer node: no AddressSanitizer error ($what)")
	  or diag map { slurp_file($_) } @errors[ 0 .. ($#errors < 2 ? $#errors : 2) ];
	$asan_node->stop('immediate', fail_ok => 1);
	my @log = grep { !/^\s/ && !/LOG:  statement:/ } split /\n/, slurp_file($asan_node->logfile);
	my $tail = join ' | ', @log[ ($#log > 3 ? $#log - 3 : 0) .. $#log ];
	$err =~ s/\s+/ /g;
	return "the AddressSanitizer node failed ($what" . ($err ne '' ? ": $err" : '') . "); its log ends: $tail";
}

# The AddressSanitizer node: the extension built from a copy of the
# source with -fsanitize=address (never installed), loaded by absolute
# path, its SQL functions created from the install script.  Returns
# (node, the directory of ASan's reports) or (undef, undef, why not).
sub asan_node
{
	return (undef, undef, 'RL_ASAN=0') if ($ENV{RL_ASAN} // 1) eq '0';
	my $root = $ENV{RL_SOURCE_DIR} // "$FindBin::RealBin/../..";
	my $libasan = `gcc -print-file-name=libasan.so 2>/dev/null`;
	chomp $libasan;
	return (undef, undef, 'gcc has no libasan (gcc -print-file-name=libasan.so)')
	  unless $libasan =~ m{^/} && -e $libasan;
	# The server binary is not built with ASan: the runtime comes in with
	# the library (verify_asan_link_order=0) and checks the extension's
	# globals.  Not its stack (--param asan-stack=0): PostgreSQL, not
	# built with ASan, leaves every ERROR by siglongjmp, which this
	# runtime cannot intercept, so the poison of the frames it unwinds
	# stays on the stack, and a later call's own locals were reported as
	# overflowed (a stack-buffer-overflow on rl_connect's first argv
	# slot, seen in CI).  Preloading the runtime into the server, which
	# would intercept it and check the heap too, hangs the server in
	# bindtextdomain() with Debian 12's gcc 12 and glibc.
	my $dir = PostgreSQL::Test::Utils::tempdir;
	make_path("$dir/src/src", "$dir/report");
	for my $d (qw(src lua sql))
	{
		return (undef, undef, "no $root/$d to build from") unless -d "$root/$d";
		system('cp', '-r', "$root/$d", "$dir/src/") == 0 or return (undef, undef, "cp $d failed");
	}
	copy("$root/$_", "$dir/src/$_") or return (undef, undef, "cannot copy $_: $!")
	  for qw(Makefile ratelimit.control);
	# Objects of the plain build must not stand in for instrumented ones.
	unlink "$dir/src/src/redis/rl_scripts_gen.h", glob("$dir/src/src/*.o"), glob("$dir/src/src/*/*.o"), glob("$dir/src/src/*.bc"), glob("$dir/src/src/*/*.bc");
	my $log = "$dir/build.log";
	system("make -C '$dir/src' -s with_llvm=no "
		  . "PG_CFLAGS='-fsanitize=address --param asan-stack=0 -fno-omit-frame-pointer -g' "
		  . "PG_LDFLAGS=-fsanitize=address > '$log' 2>&1") == 0
	  or return (undef, undef, 'the ASan build failed: ' . slurp_file($log));
	my $so = "$dir/src/ratelimit.so";
	my ($version) = slurp_file("$root/ratelimit.control") =~ /default_version = '([^']+)'/;
	(my $sql = slurp_file("$dir/src/sql/ratelimit--$version.sql")) =~ s/^\\echo .*$//m;
	$sql =~ s/MODULE_PATHNAME/$so/g;
	# Only CREATE EXTENSION may mark its configuration tables (0.5.0 on).
	$sql =~ s/^SELECT pg_catalog\.pg_extension_config_dump\(.*$//mg;

	my $anode = PostgreSQL::Test::Cluster->new('c012asan');
	$anode->init;
	my $port = $proxy->port;
	$anode->append_conf('postgresql.conf', qq{
shared_preload_libraries = '$so'
ratelimit.redis_port = $port
$node_conf
});
	local $ENV{ASAN_OPTIONS} =
	  "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:verify_asan_link_order=0:log_path=$dir/report/asan";
	my $started = eval { $anode->start(fail_ok => 1) };
	return (undef, undef, 'the ASan node did not start: ' . slurp_file($anode->logfile))
	  unless $started;
	my $ready = eval {
		$anode->safe_psql('postgres', $sql);
		$anode->safe_psql('postgres', q{
CREATE TABLE peer_t (k text);
CREATE TRIGGER peer_t_limit AFTER INSERT ON peer_t
	REFERENCING NEW TABLE AS rl_new FOR EACH STATEMENT
	EXECUTE FUNCTION rl_throttle_statement('k', 'fixed_window', '100', '1 hour');
});
		1;
	};
	unless ($ready)
	{
		($asan_node, $asan_dir) = ($anode, "$dir/report");
		return (undef, undef, asan_gone('the install script failed', $@));
	}
	return ($anode, "$dir/report");
}
