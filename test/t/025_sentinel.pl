# test/t/025_sentinel.pl
#
# Redis Sentinel (ratelimit.redis_mode = sentinel) against a real master,
# replica and three Sentinels, passwords on both sides
# (test/perl/RLSentinel.pm):
#   1. discovery: calls go to the master the Sentinels name, never to
#      redis_host/redis_port (port 1 here), nor the replica;
#   2. the Sentinels are asked in turn: with the first one stalled, the
#      next one answers;
#   3. the ROLE check: a name whose address is a replica gets the policy
#      and a WARNING, and the replica is never sent a script;
#   4. misconfigurations, each the policy plus a WARNING of its own:
#      unknown master name, wrong and missing Sentinel password,
#      unreachable Sentinels;
#   4c. Sentinels anyone may command: one is made to name a fake master
#      (SENTINEL MONITOR, no password needed), which must never be sent the
#      Redis password: with no Sentinel password the settings are refused,
#      naming them; a Sentinel that accepts our ACL user's password but
#      also answers clients that have not authenticated is refused; one
#      whose default user is off serves (TLS verification, the other way,
#      is 028's);
#   5. SENTINEL FAILOVER under load: calls move to the new master, and the
#      old one, still a writable master for ~10 s, gets no write once the
#      check interval has passed; what the fail-over lost is recorded;
#   6. the master killed: answers resume on the promoted replica, no call
#      counted twice;
#   7. the old master restarted without replicaof (a writable stale
#      master) is never written to;
#   8. no secret in any message, the log, rl_status() or CLIENT LIST.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

use RLRedis qw(rl_node rl_session rl_run rl_wait_for fact fault_mark fault_done);
use RLSentinel;

my $t0 = time;
my $top = RLSentinel->new(name => 's25_');
my $up = time - $t0;
note sprintf('master, replica and 3 Sentinels up in %.2f s', $up);
fact('sentinel_up_s.025', sprintf('%.2f', $up));
my $m0 = $top->master(10) or die 'the Sentinels agree on no master';
my $r0 = $top->other($m0);
my $pw = $top->password;
my $spw = $top->sentinel_password;
my $list = $top->sentinel_list;
my $interval = 500;

# redis_host:redis_port point at nothing (port 1): only discovery works.
my $nowhere = bless { port => 1, bind => '127.0.0.1' }, 'RLRedis';
my $node = rl_node('s025', $nowhere, qq{
ratelimit.redis_mode = 'sentinel'
ratelimit.redis_nodes = '$list'
ratelimit.redis_password = '$pw'
ratelimit.sentinel_password = '$spw'
ratelimit.sentinel_check_interval = $interval
ratelimit.deny_cache = off
});

# Everything any session printed, for the secret check at the end.
my $printed = '';

# Runs SQL in a fresh session: (stdout, stderr).
sub run_sql
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', $sql, stdout => \$out, stderr => \$err);
	$printed .= "$out\n$err\n";
	return ($out, $err);
}

# Scripts a data node ran (FCALL, EVALSHA and EVAL, refusals included).
sub writes
{
	my ($n) = @_;
	my $sum = 0;
	for my $c ('fcall', 'evalsha', 'eval')
	{
		my $s = $n->cmdstat($c);
		$sum += $s->{calls} + $s->{failed_calls} + $s->{rejected_calls};
	}
	return $sum;
}

sub role { ($_[0]->cli('ROLE') // '') =~ /^(\w+)/ ? $1 : 'none' }

my $call = "SELECT allowed, remaining FROM rl_allow('%s', 'fixed_window', 1000000000, '1 hour')";
my $status = 'SELECT endpoint, connected, fail_open, failures, last_error FROM rl_status()';

# 1. Discovery.
my $mark = fault_mark();
my $rw0 = writes($r0);
my ($out, $err) = run_sql(sprintf($call, 'disc') . ";\n" . sprintf($call, 'disc') . ";\n$status");
my @lines = split /\n/, $out;
is($lines[0], 't|999999999', 'discovery: the first call is answered by Redis');
is($lines[1], 't|999999998', 'discovery: the second counts on');
like($lines[2], qr/^sentinel:mymaster\@127\.0\.0\.1:${\ $m0->port}\|t\|0\|0\|$/,
	'discovery: rl_status names the master the Sentinels named, no failure');
is($err, '', 'discovery: no WARNING');
ok(writes($m0) > 0, 'discovery: the master ran the scripts');
is(writes($r0), $rw0, 'discovery: the replica was sent nothing');
# A session that stays open: its links show in CLIENT LIST.
my $sess = rl_session($node);
my ($o1) = rl_run($sess, sprintf($call, 'disc') . ";\nSELECT pg_backend_pid()");
my $bpid = (split /\n/, $o1)[1] // 0;
is($o1, "t|999999997\n$bpid", 'discovery: a session kept open is answered too');
my ($s_first) = $top->sentinels;
ok((grep { /^pg:\d+:$bpid$/ } @{ $s_first->client_names }),
	'discovery: it keeps a link to the first Sentinel (CLIENT LIST names the backend)');
ok((grep { /^pg:\d+:$bpid$/ } @{ $m0->client_names }),
	'discovery: and one to the master');
ok(!(grep { /^pg:\d+:$bpid$/ } @{ $r0->client_names }),
	'discovery: and none to the replica');
$sess->quit;

# 2. The first Sentinel stalled: the next one answers.
my $s0 = ($top->sentinels)[0];
$s0->stall;
($out, $err) = run_sql(sprintf($call, 'turn') . ";\n$status");
$s0->resume;
@lines = split /\n/, $out;
is($lines[0], 't|999999999', 'in turn: with the first Sentinel stalled, the call is answered by Redis');
like($lines[1] // '', qr/\|t\|0\|0\|$/, 'in turn: no failure recorded, no policy answer');
is($err, '', 'in turn: no WARNING for one silent Sentinel');
fault_done('first Sentinel stalled', $mark);

# 3. The ROLE check: "replonly" names the replica.
$mark = fault_mark();
$rw0 = writes($r0);
($out, $err) = run_sql("SET ratelimit.sentinel_master = 'replonly';\n"
	  . sprintf($call, 'role') . ";\n$status");
@lines = split /\n/, $out;
is($lines[0], 't|', 'ROLE: a replica named as master gets the policy answer');
my $rp = $r0->port;
like($err, qr/WARNING:  Redis server 127\.0\.0\.1:$rp is unavailable; calls are let through/,
	'ROLE: a WARNING names the server');
like($err, qr/DETAIL:  Sentinel named 127\.0\.0\.1:$rp as master of "replonly" but it is a replica/,
	'ROLE: the reason says it is a replica');
like($lines[1], qr/\|1\|1\|Sentinel named .* but it is a replica$/,
	'ROLE: rl_status shows one failure and the reason');
is(writes($r0), $rw0, 'ROLE: the replica was sent no script');
fault_done('Sentinel names a replica', $mark);
# A Sentinel answers is-master-down-by-addr for the first name it monitors
# at an address: "replonly" would veto the promoted replica's fail-over.
$top->remove_replonly;

# 4. Misconfigurations, each in a fresh backend.
my %warning;
sub misconfigured
{
	my ($name, $set, $msg, $detail, $last) = @_;
	my ($o, $e) = run_sql("$set;\n" . sprintf($call, "mis") . ";\n$status");
	my @l = split /\n/, $o;
	is($l[0], 't|', "$name: the policy answer");
	like($e, $msg, "$name: a WARNING that says so");
	like($e, $detail, "$name: its reason");
	like($l[1] // '', $last, "$name: rl_status().last_error");
	($warning{$name}) = $e =~ /(WARNING: .*)$/m;
}
$mark = fault_mark();
misconfigured('unknown master',
	"SET ratelimit.sentinel_master = 'nosuch'",
	qr/WARNING:  ratelimit cannot use Redis server sentinel:nosuch: check ratelimit\.sentinel_master; calls are let through/,
	qr/DETAIL:  misconfigured \(ratelimit\.sentinel_master\): no Sentinel knows a master named "nosuch" \(3 of the 3 asked/,
	qr/\|1\|1\|misconfigured \(ratelimit\.sentinel_master\): /);
my $wrong = 'Wrong-Sentinel-Pw-5150';
misconfigured('wrong Sentinel password',
	"SET ratelimit.sentinel_password = '$wrong'",
	qr/WARNING:  ratelimit cannot use Redis server sentinel:mymaster: check ratelimit\.sentinel_password and ratelimit\.sentinel_username; calls are let through/,
	qr/DETAIL:  misconfigured \(ratelimit\.sentinel_password and ratelimit\.sentinel_username\): Sentinel 127\.0\.0\.1:\d+: Redis refused the connection: WRONGPASS/,
	qr/\|1\|1\|misconfigured \(ratelimit\.sentinel_password and ratelimit\.sentinel_username\)/);
# (Without a Redis password too: with one, 4c's rule speaks first.)
misconfigured('no Sentinel password',
	"SET ratelimit.redis_password = '';\nSET ratelimit.sentinel_password = ''",
	qr/WARNING:  ratelimit cannot use Redis server sentinel:mymaster: check ratelimit\.sentinel_password; calls are let through/,
	qr/DETAIL:  misconfigured \(ratelimit\.sentinel_password\): Sentinel 127\.0\.0\.1:\d+: Redis refused the connection: NOAUTH/,
	qr/\|1\|1\|misconfigured \(ratelimit\.sentinel_password\)/);
my @free = grep { RLRedis::port_free($_) } 16690 .. 16699;
misconfigured('unreachable Sentinels',
	"SET ratelimit.redis_nodes = '127.0.0.1:$free[0],127.0.0.1:$free[1]'",
	qr/WARNING:  Redis server sentinel:mymaster is unavailable; calls are let through/,
	qr/DETAIL:  no Sentinel of ratelimit\.redis_nodes could be reached \(2 asked\); last: Sentinel 127\.0\.0\.1:$free[1]: could not connect to Redis: Connection refused/,
	qr/\|1\|1\|no Sentinel of ratelimit\.redis_nodes could be reached/);
my %distinct = map { $_ => 1 } grep { defined } values %warning;
is(scalar keys %distinct, 4, 'misconfigurations: four distinct WARNINGs');
fault_done('Sentinel misconfigurations', $mark);

# 4b. The Sentinels' password from ratelimit.sentinel_password_file: it
# wins over sentinel_password, is refused when others may read it, and
# a wrong one names the file's setting.  Its content is never shown.
$mark = fault_mark();
{
	my $dir = PostgreSQL::Test::Utils::tempdir;
	my %file;
	for ([ good => $spw, 0600 ], [ wrong => 'Wrong-Sentinel-File-Pw-7070', 0600 ],
		[ open => $spw, 0640 ])
	{
		my ($name, $pw, $mode) = @$_;
		$file{$name} = "$dir/sentinel-$name.pw";
		open my $fh, '>', $file{$name} or die "$file{$name}: $!";
		print $fh "$pw\n";
		close $fh;
		chmod $mode, $file{$name};
	}
	($out, $err) = run_sql("SET ratelimit.sentinel_password = '$wrong';\n"
		  . "SET ratelimit.sentinel_password_file = '$file{good}';\n"
		  . sprintf($call, 'pwfile') . ";\n$status");
	@lines = split /\n/, $out;
	is($lines[0], 't|999999999', 'sentinel_password_file: the password from the file serves (over a wrong sentinel_password)');
	is($err, '', 'sentinel_password_file: no WARNING');
	misconfigured('wrong password in sentinel_password_file',
		"SET ratelimit.sentinel_password_file = '$file{wrong}'",
		qr/WARNING:  ratelimit cannot use Redis server sentinel:mymaster: check ratelimit\.sentinel_password_file and ratelimit\.sentinel_username; calls are let through/,
		qr/DETAIL:  misconfigured \(ratelimit\.sentinel_password_file and ratelimit\.sentinel_username\): Sentinel 127\.0\.0\.1:\d+: Redis refused the connection: WRONGPASS/,
		qr/\|1\|1\|misconfigured \(ratelimit\.sentinel_password_file and ratelimit\.sentinel_username\)/);
	misconfigured('sentinel_password_file readable by its group',
		"SET ratelimit.sentinel_password_file = '$file{open}'",
		qr/WARNING:  ratelimit cannot use Redis server sentinel:mymaster: check ratelimit\.sentinel_password_file; calls are let through/,
		qr/DETAIL:  misconfigured \(ratelimit\.sentinel_password_file\): Sentinel 127\.0\.0\.1:\d+: ratelimit\.sentinel_password_file "\Q$file{open}\E" has group or world access \(mode 0640\)/,
		qr/\|1\|1\|misconfigured \(ratelimit\.sentinel_password_file\)/);
	unlike($printed, qr/Wrong-Sentinel-File-Pw-7070/, 'sentinel_password_file: its content in no message');
}
fault_done('Sentinel password from a file: served, wrong, readable by others', $mark);

# 4c. Sentinels anyone may command.  A Sentinel without a password takes
# SENTINEL MONITOR from anyone: an attacker makes it name a master of
# theirs, here the trap (a listener that keeps every byte it is sent),
# and a backend would open its connection there with AUTH and the Redis
# password before ROLE could say anything.
my $lpw = 'Lone-Acl-Pw-3c1d';
# The fake master was sent neither the Redis password nor anything of a
# backend's (its client name); what it got is shown, password masked.
sub trapped
{
	my ($trap, $what) = @_;
	my $got = $top->trap_bytes($trap);
	ok(index($got, $pw) < 0, "$what: the fake master was never sent the Redis password");
	ok($got !~ /pg:\d+:\d+/, "$what: no backend connected to the fake master");
	(my $shown = $got) =~ s/\Q$pw\E/<the Redis password>/g;
	diag("the fake master got:\n$shown") if index($got, $pw) >= 0 || $got =~ /pg:\d+:\d+/;
}
$mark = fault_mark();
{
	my $trap = $top->trap;
	my $lone = $top->lone_sentinel(conf => "user rl on >$lpw +\@all\n");
	my $lone_at = '127.0.0.1:' . $lone->port;
	is($lone->cli('SENTINEL', 'MONITOR', 'mymaster', '127.0.0.1', $trap->{port}, 1), 'OK',
		'open Sentinel: anyone can make it name a master of theirs');
	{
		local $s_first->{auth} = [];
		like($s_first->cli('SENTINEL', 'MONITOR', 'evil', '127.0.0.1', $trap->{port}, 1) // '',
			qr/NOAUTH/, 'a Sentinel with a password refuses SENTINEL MONITOR before AUTH');
	}

	# A Redis password, no Sentinel password, no TLS: refused, naming the
	# settings, before any Sentinel is asked.
	misconfigured('Redis password with Sentinels without one',
		"SET ratelimit.redis_nodes = '$lone_at';\nSET ratelimit.sentinel_password = ''",
		qr/WARNING:  ratelimit cannot use Redis server sentinel:mymaster: check ratelimit\.sentinel_password or ratelimit\.redis_tls_ca_file; calls are let through/,
		qr/DETAIL:  misconfigured \(ratelimit\.sentinel_password or ratelimit\.redis_tls_ca_file\): the Redis password would go to whatever server a Sentinel names: set the Sentinels' password, or ratelimit\.redis_tls with redis_tls_ca_file or redis_tls_server_name/,
		qr/\|1\|1\|misconfigured \(ratelimit\.sentinel_password or ratelimit\.redis_tls_ca_file\)/);
	trapped($trap, 'no Sentinel password');

	# Our ACL user's password is accepted, but the default user is open:
	# the Sentinel answers a PING sent before AUTH, and is refused.
	misconfigured('Sentinel open to anyone besides our ACL user',
		"SET ratelimit.redis_nodes = '$lone_at';\nSET ratelimit.sentinel_username = 'rl';\n"
		  . "SET ratelimit.sentinel_password = '$lpw'",
		qr/WARNING:  ratelimit cannot use Redis server sentinel:mymaster: check the Sentinels' requirepass or ratelimit\.redis_tls_ca_file; calls are let through/,
		qr/DETAIL:  misconfigured \(the Sentinels' requirepass or ratelimit\.redis_tls_ca_file\): Sentinel \Q$lone_at\E: it answers clients that have not authenticated/,
		qr/\|1\|1\|misconfigured \(the Sentinels' requirepass or ratelimit\.redis_tls_ca_file\)/);
	trapped($trap, 'open Sentinel with an ACL user');

	# The same Sentinel closed (default user off), watching the real
	# master under another name: it serves.
	my $cur = $top->master(5);
	my $cport = $cur->port;
	is($lone->cli('SENTINEL', 'REMOVE', 'mymaster'), 'OK', 'closed Sentinel: the fake master forgotten');
	is($lone->cli('SENTINEL', 'MONITOR', 'lone', '127.0.0.1', $cport, 1), 'OK',
		'closed Sentinel: it watches the real master as "lone"');
	is($lone->cli('SENTINEL', 'SET', 'lone', 'auth-pass', $pw), 'OK', 'closed Sentinel: with its password');
	is($lone->cli('ACL', 'SETUSER', 'default', 'off'), 'OK', 'closed Sentinel: default user off');
	$lone->set_auth('--user', 'rl', '--pass', $lpw);
	($out, $err) = run_sql("SET ratelimit.redis_nodes = '$lone_at';\nSET ratelimit.sentinel_master = 'lone';\n"
		  . "SET ratelimit.sentinel_username = 'rl';\nSET ratelimit.sentinel_password = '$lpw';\n"
		  . sprintf($call, 'closed') . ";\n$status");
	@lines = split /\n/, $out;
	is($lines[0], 't|999999999', 'closed Sentinel: the call is answered by Redis');
	like($lines[1] // '', qr/^sentinel:lone\@127\.0\.0\.1:$cport\|t\|0\|0\|$/,
		'closed Sentinel: the master it names, no failure');
	is($err, '', 'closed Sentinel: no WARNING');
	$top->kill_lone;
	$top->trap_stop($trap);
}
fault_done('Sentinels anyone may command: the Redis password withheld', $mark);

# Background sessions that call rl_allow on one key for some seconds and
# report "answered|policy".
$node->safe_psql('postgres', q{
CREATE FUNCTION hammer(k text, secs float8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record;
	a int := 0;
	p int := 0;
	t_end timestamptz := clock_timestamp() + secs * interval '1 second';
BEGIN
	WHILE clock_timestamp() < t_end LOOP
		SELECT * INTO r FROM rl_allow(k, 'fixed_window', 1000000000, '1 hour');
		IF r.remaining IS NULL THEN p := p + 1; ELSE a := a + 1; END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
	RETURN a || '|' || p;
END
$$});

sub hammer
{
	my ($key, $secs, $sessions) = @_;
	my @h;
	for (1 .. $sessions)
	{
		my $o = '';
		my $e = '';
		my $h = IPC::Run::start [
			'psql', '-XAtq', '-h', $node->host, '-p', $node->port,
			'-d', 'postgres', '-c', "SELECT hammer('$key', $secs)"
		  ],
		  '<', \undef, '>', \$o, '2>', \$e;
		push @h, [ $h, \$o, \$e ];
	}
	return sub {
		my ($answered, $policy) = (0, 0);
		for my $x (@h)
		{
			$x->[0]->finish;
			$printed .= "${ $x->[1] }\n${ $x->[2] }\n";
			my ($got, $pol) = ${ $x->[1] } =~ /^(\d+)\|(\d+)/ or next;
			$answered += $got;
			$policy += $pol;
		}
		return ($answered, $policy);
	};
}

# The count Redis holds for a key, read through the extension.
sub count_of
{
	my ($key) = @_;
	my ($o) = run_sql("SELECT remaining FROM rl_peek('$key', 'fixed_window', 1000000000, '1 hour')");
	return $o =~ /^(\d+)$/ ? 1000000000 - $1 : undef;
}

# 5. SENTINEL FAILOVER under load.
$mark = fault_mark();
my $wait = hammer('fo', 7, 4);
usleep(1_500_000);
my $tf = time;
$top->failover;
my $m1 = rl_wait_for(sub { my $m = $top->master; $m && $m == $r0 }, 15);
ok(defined $m1, 'FAILOVER: every Sentinel names the replica');
note sprintf('Sentinels switched %.2f s after SENTINEL FAILOVER', $m1 // -1);
fact('sentinel_switch_s.025', sprintf('%.2f', $m1 // -1));
# Watch the old master: when did it get its last write from us?
my $last_write = time;
my $w = writes($m0);
while (time - $tf < ($m1 // 0) + $interval / 1000 + 0.5)
{
	my $now = writes($m0);
	$last_write = time if $now != $w;
	$w = $now;
	usleep(20_000);
}
my $w1 = writes($m0);
is(role($m0), 'master', 'FAILOVER: the old master is still a writable master (a stale link would write)');
usleep(1_000_000);
is(writes($m0), $w1, 'FAILOVER: the old master gets no write once the check interval has passed');
my ($answered, $policy) = $wait->();
ok($answered > 0, "FAILOVER: $answered calls answered by Redis");
my $count = count_of('fo');
ok(defined $count && $count <= $answered,
	'FAILOVER: no call counted twice (Redis count <= calls answered)');
my $lost = $answered - ($count // 0);
note sprintf('FAILOVER: %d calls answered, %d policy answers, Redis count %d: %d lost; last write to the old master %.2f s after the Sentinels switched',
	$answered, $policy, $count // -1, $lost, $last_write - $tf - ($m1 // 0));
fact('sentinel_failover_answered.025', $answered);
fact('sentinel_failover_lost.025', $lost);
fact('sentinel_failover_policy.025', $policy);
fact('sentinel_failover_last_old_write_s.025',
	sprintf('%.2f', $last_write - $tf - ($m1 // 0)));
($out) = run_sql(sprintf($call, 'fo2') . ";\nSELECT endpoint FROM rl_status()");
is($out, "t|999999999\nsentinel:mymaster\@127.0.0.1:" . $r0->port,
	'FAILOVER: a new backend goes to the new master');
fault_done('SENTINEL FAILOVER under load', $mark);

# The old master becomes a replica of the new one (Sentinel converts it
# about 10 s after the fail-over); wait for that, so it can take over.
ok(defined rl_wait_for(sub { role($m0) eq 'slave' && defined $top->wait_synced(0.1) && defined $top->wait_sentinels(0.1) }, 30),
	'the old master is now an in-sync replica the Sentinels know');

# 6. The master killed.  Sentinel starts no second fail-over of a master
# within 2 x failover-timeout (10 s here) of the first.
usleep(100_000) while time < $tf + 9;
$mark = fault_mark();
$wait = hammer('kill', 5, 2);
usleep(1_000_000);
my $tk = time;
$r0->kill9;
my $back = rl_wait_for(sub {
	my ($o) = run_sql(sprintf($call, 'probe'));
	$o =~ /^t\|\d+$/;
}, 20);
ok(defined $back, 'killed master: answers resume');
$back = time - $tk if defined $back;
note sprintf('killed master: answers resumed %.2f s after the kill', $back // -1);
fact('sentinel_kill_resume_s.025', sprintf('%.2f', $back // -1));
($answered, $policy) = $wait->();
$count = count_of('kill');
ok(defined $count && $count <= $answered + $policy,
	'killed master: no call counted twice (count <= answered + unknown outcomes)');
note sprintf('killed master: %d answered, %d policy answers, Redis count %d',
	$answered, $policy, $count // -1);
fact('sentinel_kill_answered.025', $answered);
fact('sentinel_kill_lost.025', $answered - ($count // 0));
is($top->master(5), $m0, 'killed master: the Sentinels name the promoted replica');
fault_done('master killed', $mark);

# 7. The killed master restarted without replicaof: a writable stale
# master the Sentinels no longer name.
$mark = fault_mark();
$top->restart_as_master($r0);
is(role($r0), 'master', 'stale master: it came back as a master');
$wait = hammer('stale', 2, 2);
($answered, $policy) = $wait->();
ok($answered > 0, 'stale master: calls answered meanwhile');
is(writes($r0), 0, 'stale master: never written to');
fault_done('stale master restarted', $mark);

# 8. Secrets.
my ($st) = run_sql('SELECT * FROM rl_status()');
$printed .= $st;
my $clients = join "\n", map { $_->cli('CLIENT', 'LIST') // '' } grep { $_->pid } $top->sentinels, $top->data;
my $log = slurp_file($node->logfile);
for my $secret ($pw, $spw, $wrong, $lpw)
{
	unlike($printed, qr/\Q$secret\E/, 'no password in any output or rl_status');
	unlike($clients, qr/\Q$secret\E/, 'no password in CLIENT LIST');
	my $l = $log;
	$l =~ s/^.*\b(?:parameter "ratelimit\.\w+_password" changed to|statement:) .*$//mg;
	unlike($l, qr/\Q$secret\E/, 'no password in the server log');
}

done_testing();
