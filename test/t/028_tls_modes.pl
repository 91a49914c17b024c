# test/t/028_tls_modes.pl
#
# TLS (ratelimit.redis_tls) in cluster and sentinel modes, against real
# servers that speak TLS to each other too, with certificates this suite
# makes with openssl (026 covers standalone):
#   1. a cluster of 3 masters with TLS ports and tls-cluster yes (CLUSTER
#      SLOTS and MOVED name the TLS ports to a TLS client): every master
#      does its share over TLS (INFO commandstats; CLIENT LIST shows our
#      clients on the TLS ports only); exact counts with several
#      sessions; a MOVED after a slot migration followed over TLS;
#   2. a wrong CA, a wrong server name and an expired server certificate
#      are configuration errors in cluster mode too, each naming its
#      check and the setting to look at;
#   3. statement_timeout and cancel end a call stalled on one TLS master
#      (SIGSTOP), while the other masters still answer;
#   4. Sentinels, master and replica on TLS (tls-replication yes): the
#      extension asks the Sentinels over TLS and talks TLS to the master
#      they name; after SENTINEL FAILOVER the counts are exact on the new
#      master; a Sentinel whose certificate does not verify gives a
#      WARNING naming the Sentinel and the setting, an expired
#      certificate on the master they name one naming the master;
#      TLS verifying the master against our CA guards the Redis password
#      where the Sentinels have none (a lone Sentinel anyone may command,
#      made to name an attacker's TLS Redis, whose certificate another CA
#      signed: never sent AUTH); TLS with the system's authorities and no
#      server name does not, and is refused naming the settings.
# The same ratelimit.redis_tls_* settings serve every node: the cluster's
# masters, the Sentinels and the master they name.  The servers keep their
# plaintext ports for this suite's own inspection only.  TLS ports
# 17300-17399.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Spec;
use IPC::Run;
use Time::HiRes qw(time usleep);

use RLTls qw(rl_tls_ca rl_tls_cert);
use RLRedis qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_extension
  rl_wait_for rl_status_of fact);
use RLCluster;
use RLSentinel;

my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir);
my $t_start = time;

# --- certificates: a CA, the servers' (127.0.0.1 and localhost), an
# expired one of the same names, and a second CA that signed none.
my $san = "subjectAltName=IP:127.0.0.1,DNS:localhost";
rl_tls_ca($dir, 'ca');
rl_tls_ca($dir, 'other-ca');
rl_tls_cert($dir, 'server', 'ca', 2, $san);
rl_tls_cert($dir, 'expired', 'ca', -1, $san);
my @server_tls = ('--tls-cert-file', "$dir/server.crt", '--tls-key-file', "$dir/server.key",
	'--tls-ca-cert-file', "$dir/ca.crt", '--tls-auth-clients', 'no');

my $all_err = '';
sub run
{
	my ($sess, $sql) = @_;
	my ($out, $err, $t) = rl_run($sess, $sql);
	$all_err .= $err;
	return ($out, $err, $t);
}
sub allow
{
	my ($key, $limit) = @_;
	return "SELECT allowed FROM rl_allow('$key', 'fixed_window', " . ($limit // 2) . ", '1 hour')";
}
sub pid_of { (run($_[0], 'SELECT pg_backend_pid()'))[0] }

# Scripts a data node ran, however sent (EVALSHA, EVAL, FCALL).
sub scripts
{
	my ($n) = @_;
	my $sum = 0;
	$sum += $n->cmdstat($_)->{calls} for qw(evalsha eval fcall);
	return $sum;
}

# The local ports of the backends' clients (name pg:...) on a server.
sub pg_laddrs
{
	my ($n) = @_;
	return map { /\bladdr=[\d.]+:(\d+)\b/ ? $1 : 'none' }
	  grep { /\bname=pg:/ } split /\n/, $n->cli('CLIENT', 'LIST') // '';
}

# A failed check: the policy's answer (closed), one WARNING naming the
# setting, the detail saying which check failed, "misconfigured".
sub refused
{
	my ($node, $what, $key, $set, $warn, $detail, $setting) = @_;
	my $s = rl_session($node);
	run($s, $_) for @$set;
	run($s, "SET ratelimit.failure_mode = 'closed'");
	my ($out, $err, $t) = run($s, allow($key, 100));
	is($out, 'f', "$what: the policy's answer (closed)");
	like($err, qr/WARNING:  F0000: ratelimit cannot use Redis server $warn: check \Q$setting\E/,
		"$what: the WARNING names $setting");
	like($err, qr/DETAIL:  .*$detail/, "$what: the detail says: $detail");
	like(rl_status_of($s)->{last_error}, qr/^misconfigured \(\Q$setting\E\)/,
		"$what: last_error is misconfigured");
	ok($t < 2, sprintf("$what: answered in %.0f ms", $t * 1000));
	note $err;
	$s->quit;
}

# ==== 1. A TLS cluster: 3 masters, TLS ports 17300-17302.
my $t0 = time;
my $tls_base;
my $rc = RLCluster->new(
	name => 'c28_',
	masters => 3,
	replicas => 0,
	node_args => sub {
		my ($port) = @_;
		$tls_base //= $port;
		return ('--tls-port', 17300 + $port - $tls_base, '--tls-cluster', 'yes',
			'--tls-replication', 'yes', @server_tls);
	});
my %tls_port = map { $_->port => 17300 + $_->port - $tls_base } $rc->nodes;
$_->{migrate_port} = $tls_port{ $_->port } for $rc->nodes;
note sprintf('TLS cluster up in %.2f s', time - $t0);
my @masters = $rc->masters;
is(scalar @masters, 3, 'TLS cluster: three masters serve the slots');
my $seeds = join ',', map { "127.0.0.1:$tls_port{$_->port}" } @masters;

my $cnode = rl_node('c028', $masters[0], qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
ratelimit.redis_tls = on
ratelimit.redis_tls_ca_file = '$dir/ca.crt'
ratelimit.connect_timeout = 500
ratelimit.command_timeout = 500
ratelimit.retry_interval = 100
ratelimit.deny_cache = off
});
my $dboid = $cnode->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
my $mon = rl_session($cnode);

# Keys by the master that serves them (the key's slot is that of
# "{dboid:key}", as the extension names it).
sub key_on
{
	my ($m, $prefix, $avoid) = @_;
	for my $i (1 .. 100000)
	{
		my $k = "$prefix$i";
		next if $avoid && $avoid->{$k};
		my $slot = RLCluster::slot_of("{$dboid:$k}");
		my $owner = $rc->master_of_slot($slot);
		return $k if $owner && $owner->port == $m->port;
	}
	die 'no key found';
}
# The Redis key of rl_allow(key, 'fixed_window', limit, '1 hour').
sub redis_key { "rl:{$dboid:$_[0]}:fixed_window:$_[1]:3600000ms" }

# Our clients are on the TLS ports only (this also warms each master:
# the scripts are loaded).
{
	my $s = rl_session($cnode);
	run($s, allow(key_on($_, 'warm' . $_->port . '_'), 100)) for @masters;
	for my $m (@masters)
	{
		my @ports = pg_laddrs($m);
		ok(@ports && !grep({ $_ != $tls_port{ $m->port } } @ports),
			'TLS cluster: every client on master ' . $m->port . ' is on its TLS port (' . "@ports" . ')');
	}
	$s->quit;
}

# Routing: 10 keys per master, each called twice with limit 1.
{
	my %before = map { $_->port => scripts($_) } @masters;
	my @keys;
	for my $m (@masters)
	{
		my %seen;
		for (1 .. 10)
		{
			my $k = key_on($m, 'r' . $m->port . '_', \%seen);
			$seen{$k} = 1;
			push @keys, $k;
		}
	}
	my $values = join ',', map { "('$_')" } @keys;
	my $out = $cnode->safe_psql('postgres',
		"SELECT string_agg(CASE WHEN a THEN 't' ELSE 'f' END, '') FROM (SELECT (rl_allow(k, 'fixed_window', 1, '1 hour')).allowed AS a
		   FROM (VALUES $values) v(k), generate_series(1, 2) g ORDER BY k, g) x");
	is($out, 'tf' x 30, 'TLS cluster routing: 30 keys, limit 1, exact (t then f each)');
	for my $m (@masters)
	{
		is(scripts($m) - $before{ $m->port }, 20,
			'TLS cluster routing: master ' . $tls_port{ $m->port } . ' ran its 20 calls');
	}
	my $used = grep { ($rc->fw_used(redis_key($_, 1)) // -1) == 1 } @keys;
	is($used, 30, 'TLS cluster routing: each key counted once on its master');
}

# Exact counts with several sessions: 4 x 30 calls, limit 50, one key.
{
	my $k = key_on($masters[1], 'many');
	my @s = map { rl_session($cnode) } 1 .. 4;
	rl_start($_, "SELECT count(*) FILTER (WHERE a) FROM (SELECT (rl_allow('$k', 'fixed_window', 50, '1 hour')).allowed AS a FROM generate_series(1, 30)) x")
	  for @s;
	my $sum = 0;
	for (@s)
	{
		my ($out, $err) = rl_finish($_);
		$all_err .= $err;
		$sum += $out;
	}
	is($sum, 50, 'TLS cluster, 4 sessions x 30 calls on one key: exactly 50 allowed');
	is($rc->fw_used(redis_key($k, 50)), 50, 'TLS cluster, 4 sessions: Redis counts 50');
	$_->quit for @s;
}

# A MOVED followed over TLS: a key's slot moves from master 0 to master 2.
{
	my ($from, $to) = ($masters[0], $masters[2]);
	my $k = key_on($from, 'moved');
	my $slot = RLCluster::slot_of("{$dboid:$k}");
	my $s = rl_session($cnode);
	is((run($s, allow($k, 3)))[0], 't', 'MOVED over TLS: first call on the old owner');
	$rc->migrate_begin($slot, $from, $to);
	$rc->migrate_end($slot, $from, $to);
	my $before = scripts($to);
	run($s, 'SET client_min_messages = debug1');
	my ($o2, $e2) = run($s, allow($k, 3));
	run($s, 'RESET client_min_messages');
	my @got = ($o2, map { (run($s, allow($k, 3)))[0] } 1 .. 2);
	is("@got", 't t f', 'MOVED over TLS: the count goes on exactly (limit 3)');
	like($e2, qr/MOVED/, 'MOVED over TLS: the extension was redirected');
	is(scripts($to) - $before, 3, 'MOVED over TLS: the new owner ran the calls');
	is($to->fw_used(redis_key($k, 3)), 3, 'MOVED over TLS: counted 3 on the new owner');
	is(rl_status_of($s)->{failures}, '0', 'MOVED over TLS: no failure');
	ok(!grep({ $_ != $tls_port{ $to->port } } pg_laddrs($to)),
		'MOVED over TLS: the new owner was reached on its TLS port');
	$s->quit;
}

# ==== 2. Verification failures in cluster mode.
refused($cnode, 'cluster, wrong CA', 'ca1',
	[ "SET ratelimit.redis_tls_ca_file = '$dir/other-ca.crt'" ],
	'127\.0\.0\.1:\d+',
	'did not verify: (unable to get local issuer certificate|self-signed certificate in certificate chain)',
	'ratelimit.redis_tls_ca_file');
refused($cnode, 'cluster, wrong server name', 'sn1',
	[ "SET ratelimit.redis_tls_server_name = 'redis.example.com'" ],
	'127\.0\.0\.1:\d+', 'did not verify: [Hh]ostname mismatch',
	'ratelimit.redis_tls_server_name');
{
	# The name given is checked on every node: all certificates say localhost.
	my $s = rl_session($cnode);
	run($s, "SET ratelimit.redis_tls_server_name = 'localhost'");
	my @got = map { (run($s, allow(key_on($_, 'name' . $_->port . '_'), 1)))[0] } @masters;
	is("@got", 't t t', 'cluster, server name localhost: verified on every master');
	is(rl_status_of($s)->{failures}, '0', 'cluster, server name localhost: no failure');
	$s->quit;
}
{
	# An expired certificate on one master: its keys get the policy and the
	# WARNING; the other masters answer.
	my $m = $masters[1];
	is($m->cli('CONFIG', 'SET', 'tls-cert-file', "$dir/expired.crt", 'tls-key-file', "$dir/expired.key"),
		'OK', 'expired: master ' . $tls_port{ $m->port } . ' now shows an expired certificate');
	refused($cnode, 'cluster, expired certificate', key_on($m, 'exp'), [],
		"127\\.0\\.0\\.1:$tls_port{$m->port}",
		'did not verify: certificate has expired', "the Redis server's tls-cert-file");
	my $s = rl_session($cnode);
	is((run($s, allow(key_on($masters[0], 'exp'), 1)))[0], 't',
		'expired: another master still answers');
	$s->quit;
	is($m->cli('CONFIG', 'SET', 'tls-cert-file', "$dir/server.crt", 'tls-key-file', "$dir/server.key"),
		'OK', 'expired: the valid certificate is back');
}

# ==== 3. One TLS master stalled: statement_timeout and cancel end the call.
{
	my $m = $masters[2];
	my $k = key_on($m, 'stall');
	my $other = key_on($masters[0], 'stall');
	my $x = rl_session($cnode);
	is((run($x, allow($k, 100)))[0], 't', 'stall: a warm TLS link to the master');
	run($x, 'SET ratelimit.command_timeout = 60000');
	run($x, 'SET ratelimit.connect_timeout = 60000');
	my $pid = pid_of($x);
	$m->stall;
	run($x, "SET statement_timeout = '300ms'");
	my ($out, $err, $t) = run($x, allow($k, 100));
	like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
		'stall: statement_timeout ends a read from a stalled TLS master');
	ok($t < 2, sprintf('stall: statement_timeout after %.0f ms', $t * 1000));
	run($x, 'RESET statement_timeout');

	# The timeout dropped the link: the next call stalls in the handshake.
	rl_start($x, allow($k, 100));
	ok(defined rl_wait_extension($mon, $pid), 'stall: waits on the stalled master');
	my $t1 = time;
	run($mon, "SELECT pg_cancel_backend($pid)");
	($out, $err) = rl_finish($x);
	my $tc = time - $t1;
	like($err, qr/ERROR:  57014: canceling statement due to user request/,
		'stall: pg_cancel_backend ends a TLS handshake with a stalled master');
	ok($tc < 2, sprintf('stall: cancel took %.0f ms', $tc * 1000));
	fact('figure.028', sprintf('stalled TLS cluster master: pg_cancel_backend to ERROR in %.0f ms', $tc * 1000));
	is((run($x, allow($other, 100)))[0], 't', 'stall: another master answers meanwhile');
	$m->resume;
	my $ok = rl_wait_for(sub { (run($x, allow($k, 100)))[0] eq 't' }, 10);
	ok(defined $ok, 'stall: the master answers again once resumed');
	$x->quit;
}
$mon->quit;
$cnode->stop;
note sprintf('cluster part done in %.1f s', time - $t_start);

# ==== 4. Sentinel over TLS: TLS ports 17350-17354.
$t0 = time;
my $top = RLSentinel->new(name => 's28_', tls => { port => 17350, args => \@server_tls });
note sprintf('TLS Sentinel topology up in %.2f s', time - $t0);
my $m0 = $top->master(10) or die 'the Sentinels agree on no master';
my $r0 = $top->other($m0);
my $pw = $top->password;
my $spw = $top->sentinel_password;
my $list = $top->sentinel_list;
my $nowhere = bless { port => 1, bind => '127.0.0.1' }, 'RLRedis';
my $snode = rl_node('s028', $nowhere, qq{
ratelimit.redis_mode = 'sentinel'
ratelimit.redis_nodes = '$list'
ratelimit.redis_password = '$pw'
ratelimit.sentinel_password = '$spw'
ratelimit.sentinel_check_interval = 300
ratelimit.redis_tls = on
ratelimit.redis_tls_ca_file = '$dir/ca.crt'
ratelimit.connect_timeout = 500
ratelimit.command_timeout = 500
ratelimit.retry_interval = 100
ratelimit.deny_cache = off
});

{
	my $s = rl_session($snode);
	run($s, allow('swarm', 100));	# loads the scripts
	my $before = scripts($m0);
	my @got = map { (run($s, allow('sd', 2)))[0] } 1 .. 3;
	is("@got", 't t f', 'Sentinel over TLS: discovery, exact answers');
	is(scripts($m0) - $before, 3, 'Sentinel over TLS: the master ran the calls');
	is(scripts($r0), 0, 'Sentinel over TLS: the replica ran none');
	my $mport = $top->known_port($m0->port);
	like(rl_status_of($s)->{endpoint}, qr/^sentinel:mymaster\@127\.0\.0\.1:$mport$/,
		'Sentinel over TLS: the endpoint is the master\'s TLS port');
	my @ports = pg_laddrs($m0);
	ok(@ports && !grep({ $_ != $mport } @ports),
		"Sentinel over TLS: our client on the master is on its TLS port (@ports)");
	my @sports = map { pg_laddrs($_) } $top->sentinels;
	my %stls = map { $top->known_port($_->port) => 1 } $top->sentinels;
	ok(@sports && !grep({ !$stls{$_} } @sports),
		"Sentinel over TLS: our Sentinel clients are on TLS ports (@sports)");
	$s->quit;
}

# A Sentinel's certificate that does not verify: a WARNING of its own.
refused($snode, 'Sentinel, wrong CA', 'sca',
	[ "SET ratelimit.redis_tls_ca_file = '$dir/other-ca.crt'" ],
	'sentinel:mymaster',
	'Sentinel 127\.0\.0\.1:\d+: TLS handshake failed: .*did not verify',
	'ratelimit.redis_tls_ca_file');
refused($snode, 'Sentinel, wrong server name', 'ssn',
	[ "SET ratelimit.redis_tls_server_name = 'redis.example.com'" ],
	'sentinel:mymaster',
	'Sentinel 127\.0\.0\.1:\d+: TLS handshake failed: .*[Hh]ostname mismatch',
	'ratelimit.redis_tls_server_name');

# A Sentinel without a password (TLS port 17355) and an attacker's TLS
# Redis (17356) with a certificate for its own address from another CA.
{
	my $mport = $top->known_port($m0->port);
	my $lone = $top->lone_sentinel(tls_port => 17355,
		conf => "sentinel monitor open 127.0.0.1 $mport 1\nsentinel auth-pass open $pw\n");
	rl_tls_cert($dir, 'evil', 'other-ca', 2, $san);
	my $evil = RLRedis->new(name => 'evil28', args => [ '--tls-port', 17356,
		'--tls-cert-file', "$dir/evil.crt", '--tls-key-file', "$dir/evil.key",
		'--tls-ca-cert-file', "$dir/other-ca.crt", '--tls-auth-clients', 'no' ]);
	my $auths = sub { my $st = $evil->cmdstat('auth'); $st->{calls} + $st->{failed_calls} + $st->{rejected_calls} };
	my @open = ("SET ratelimit.redis_nodes = '127.0.0.1:17355'",
		"SET ratelimit.sentinel_master = 'open'", "SET ratelimit.sentinel_password = ''");

	# Our CA verifies the master: no Sentinel password needed.
	my $s = rl_session($snode);
	run($s, $_) for @open;
	my $before = scripts($m0);
	my ($out, $err) = run($s, allow('open1', 100));
	is($out, 't', 'TLS guard: a Sentinel without a password, the master verified by our CA: served');
	is($err, '', 'TLS guard: no WARNING');
	is(scripts($m0) - $before, 1, 'TLS guard: the master ran the call');
	$s->quit;

	# TLS with the system's authorities, checked against the address a
	# Sentinel gave: anyone can have a certificate for their own address.
	refused($snode, 'TLS without a CA file or server name', 'open2',
		[ @open, "SET ratelimit.redis_tls_ca_file = ''" ],
		'sentinel:open', 'the Redis password would go to whatever server a Sentinel names',
		'ratelimit.sentinel_password or ratelimit.redis_tls_ca_file');
	# A pinned server name is a guard too: the rule lets it through to the
	# certificate check, which the system's authorities fail here.
	refused($snode, 'TLS with a server name, no CA file', 'open3',
		[ @open, "SET ratelimit.redis_tls_ca_file = ''", "SET ratelimit.redis_tls_server_name = 'localhost'" ],
		'sentinel:open', 'Sentinel 127\.0\.0\.1:17355: TLS handshake failed: .*did not verify',
		'ratelimit.redis_tls_ca_file');

	# The attack: the Sentinel, no password needed, names the attacker's
	# Redis.  Its certificate does not verify: it is never sent AUTH.
	is($lone->cli('SENTINEL', 'REMOVE', 'open'), 'OK', 'attack: the open Sentinel forgets the master');
	is($lone->cli('SENTINEL', 'MONITOR', 'open', '127.0.0.1', 17356, 1), 'OK',
		'attack: and names the attacker\'s TLS Redis');
	refused($snode, 'attacker\'s master, certificate of another CA', 'open4', [@open],
		'(sentinel:open\@)?127\.0\.0\.1:17356', 'did not verify',
		'ratelimit.redis_tls_ca_file');
	is($auths->(), 0, 'attack: the attacker\'s Redis was never sent AUTH');
	# The control: with the attacker's CA in the CA file too, it would be.
	PostgreSQL::Test::Utils::append_to_file("$dir/both-ca.crt",
		PostgreSQL::Test::Utils::slurp_file("$dir/$_.crt")) for qw(ca other-ca);
	$s = rl_session($snode);
	run($s, $_) for @open, "SET ratelimit.redis_tls_ca_file = '$dir/both-ca.crt'";
	run($s, allow('open5', 100));
	$s->quit;
	ok($auths->() > 0, 'control: with its CA in redis_tls_ca_file, the attacker\'s Redis is sent AUTH');
	$top->kill_lone;
	$evil->kill9;
}

# SENTINEL FAILOVER: the calls move to the new master over TLS, and the
# counts there are exact.
{
	$top->remove_replonly;
	my $s = rl_session($snode);
	is((run($s, allow('sf0', 1000)))[0], 't', 'fail-over: answered before');
	$t0 = time;
	$top->failover;
	my $named = rl_wait_for(sub { my $m = $top->master(0); $m && $m == $r0 }, 20);
	ok(defined $named, 'fail-over: the Sentinels name the replica');
	note sprintf('SENTINEL FAILOVER named the new master in %.2f s', time - $t0);
	# Calls land on the new master within the check interval.
	my $ok = rl_wait_for(sub {
		my $b = scripts($r0);
		run($s, allow('sf0', 1000));
		scripts($r0) > $b;
	}, 15);
	ok(defined $ok, 'fail-over: calls reach the new master over TLS');
	my $old = scripts($m0);
	my $new = scripts($r0);
	my @got = map { (run($s, allow('sf1', 4)))[0] } 1 .. 6;
	is("@got", 't t t t f f', 'fail-over: exact answers on the new master (limit 4)');
	is(scripts($r0) - $new, 6, 'fail-over: the new master ran all 6');
	is(scripts($m0) - $old, 0, 'fail-over: the old master ran none');
	$r0->cmd('AUTH', $pw);
	is($r0->fw_used(redis_key_s('sf1', 4)), 4, 'fail-over: counted 4 on the new master');
	like(rl_status_of($s)->{endpoint}, qr/:\Q${\ $top->known_port($r0->port)}\E$/,
		'fail-over: the endpoint is the new master\'s TLS port');
	$s->quit;
}
# The master the Sentinels name shows an expired certificate: the
# WARNING names the master, not a Sentinel, and the server's setting.
{
	my $mport = $top->known_port($r0->port);
	is($r0->cli('CONFIG', 'SET', 'tls-cert-file', "$dir/expired.crt", 'tls-key-file', "$dir/expired.key"),
		'OK', 'expired master: the new master now shows an expired certificate');
	refused($snode, 'Sentinel-named master, expired certificate', 'sexp', [],
		"(sentinel:mymaster\\@)?127\\.0\\.0\\.1:$mport",
		'did not verify: certificate has expired', "the Redis server's tls-cert-file");
	is($r0->cli('CONFIG', 'SET', 'tls-cert-file', "$dir/server.crt", 'tls-key-file', "$dir/server.key"),
		'OK', 'expired master: the valid certificate is back');
}

sub redis_key_s
{
	my $oid = $snode->safe_psql('postgres',
		'SELECT oid FROM pg_database WHERE datname = current_database()');
	return "rl:{$oid:$_[0]}:fixed_window:$_[1]:3600000ms";
}

unlike($all_err, qr/\Q$pw\E|\Q$spw\E/, 'no password in any message');
$snode->stop;
note sprintf('028 done in %.1f s', time - $t_start);
done_testing();
