# test/t/026_tls.pl
#
# TLS to Redis (ratelimit.redis_tls): a real redis-server with a TLS port
# and certificates this suite makes with openssl.  A verified connection
# answers exactly; each failed check (unknown CA, wrong name, a client
# certificate missing where the server requires one) is a configuration
# error with the policy's answer and a WARNING naming the check and the
# setting; plaintext against the TLS port and TLS against the plaintext
# port end within the timeouts with distinct errors; cancel and
# statement_timeout end a stalled handshake and a stalled read; a
# restarted server is reconnected, also after its CA and certificate were
# rotated in place (the same paths), by the same long-lived session; the
# password is in no message and in no CLIENT LIST.  Ports 16700-16749.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Spec;
use IPC::Run;
use Time::HiRes qw(time usleep);

use RLTls qw(rl_tls_ca rl_tls_cert);
use RLRedis qw(rl_session rl_run rl_start rl_finish rl_wait_extension rl_wait_for
  rl_status_of fact);

my $dir = PostgreSQL::Test::Utils::tempdir;
$dir = File::Spec->rel2abs($dir);
my $secret = 'Tls-Secret-7c41';

# --- certificates: a CA, the server's (127.0.0.1 and localhost), a
# client's, and a second CA that signed none of them.
rl_tls_ca($dir, 'ca');
rl_tls_ca($dir, 'other-ca');
rl_tls_cert($dir, 'server', 'ca', 2, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth");
rl_tls_cert($dir, 'client', 'ca', 2, "extendedKeyUsage=clientAuth");

# --- one redis-server with a TLS port and a plaintext port.
sub free_port
{
	my ($from) = @_;
	for my $p ($from .. 16749)
	{
		return $p if RLRedis::port_free($p);
	}
	die 'no free port in 16700-16749';
}
my $tls_port = free_port(16700 + ($$ % 20));
my $plain_port = free_port($tls_port + 1);
my $pidfile = "$dir/redis.pid";
my $redis_pid;

sub redis_start
{
	unlink $pidfile;
	IPC::Run::run [ RLRedis::rl_bin('server'), '--bind', '127.0.0.1', '--port', $plain_port,
		'--tls-port', $tls_port, '--tls-cert-file', "$dir/server.crt",
		'--tls-key-file', "$dir/server.key", '--tls-ca-cert-file', "$dir/ca.crt",
		'--tls-auth-clients', 'no', '--requirepass', $secret,
		'--save', '', '--appendonly', 'no', '--daemonize', 'yes',
		'--dir', $dir, '--pidfile', $pidfile, '--logfile', "$dir/redis.log" ],
	  '>', \my $out, '2>', \my $err;
	for (1 .. 100)
	{
		if (-s $pidfile && (cli('PING') // '') eq 'PONG')
		{
			open my $fh, '<', $pidfile or die;
			chomp($redis_pid = <$fh>);
			close $fh;
			return;
		}
		usleep(50_000);
	}
	die "redis-server with TLS did not start: $err";
}

# redis-cli over TLS, verifying the server as the extension does.
sub cli
{
	my @cmd = (RLRedis::rl_bin('cli'), '--tls', '--cacert', "$dir/ca.crt",
		'--cert', "$dir/client.crt", '--key', "$dir/client.key",
		'-h', '127.0.0.1', '-p', $tls_port, '-a', $secret, '--no-auth-warning', @_);
	my $out = '';
	eval { IPC::Run::run \@cmd, '<', \undef, '>', \$out, '2>', \my $err, IPC::Run::timeout(10) };
	return undef if $@;
	chomp $out;
	return $out;
}

sub redis_kill
{
	return unless $redis_pid;
	kill 'CONT', $redis_pid;
	kill 'KILL', $redis_pid;
	usleep(20_000) while kill 0, $redis_pid;
	undef $redis_pid;
}
END { redis_kill() }

redis_start();

my $node = PostgreSQL::Test::Cluster->new('c026');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.redis_host = '127.0.0.1'
ratelimit.redis_port = $tls_port
ratelimit.redis_password = '$secret'
ratelimit.redis_tls = on
ratelimit.redis_tls_ca_file = '$dir/ca.crt'
ratelimit.connect_timeout = 500
ratelimit.command_timeout = 500
ratelimit.retry_interval = 100
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

my $s = rl_session($node);
my $mon = rl_session($node);
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

# 1. A verified connection: exact answers, counted on the TLS server.
{
	my @got = map { (run($s, allow('tls:a')))[0] } 1 .. 3;
	is("@got", 't t f', 'verified TLS: the third call of limit 2 is denied');
	my $st = rl_status_of($s);
	is($st->{connected}, 't', 'verified TLS: connected');
	is($st->{failures}, '0', 'verified TLS: no failure');
	my $pid = pid_of($s);
	my $list = cli('CLIENT', 'LIST') // '';
	my ($line) = grep { /name=pg:$dboid:$pid\b/ } split /\n/, $list;
	ok(defined $line && $line =~ /laddr=127\.0\.0\.1:$tls_port\b/,
		"verified TLS: the backend's client is on the TLS port");
	my @keys = grep { /tls:a/ } split /\n/, cli('KEYS', '*') // '';
	is(scalar(@keys), 1, 'verified TLS: one key on the server');
	like(cli('TTL', $keys[0]) // '', qr/^\d+$/, 'verified TLS: the key has a TTL');

	# The name, given: the server's certificate names localhost.
	run($s, "SET ratelimit.redis_tls_server_name = 'localhost'");
	is((run($s, allow('tls:a')))[0], 'f', 'server name localhost: verified, Redis answers');
	is(rl_status_of($s)->{failures}, '0', 'server name localhost: no failure');
}

# A failed check: the policy's answer (closed: f with a retry time), one
# WARNING naming the check and the setting, and "misconfigured".
sub refused
{
	my ($what, $set, $check, $setting) = @_;
	# A fresh backend: its own link, and its first WARNING.
	my $s = rl_session($node);
	run($s, $_) for @$set;
	run($s, "SET ratelimit.failure_mode = 'closed'");
	my ($out, $err, $t) = run($s, allow("tls:$what", 100));
	is($out, 'f', "$what: the policy's answer (closed)");
	like($err, qr/WARNING:  F0000: ratelimit cannot use Redis server 127\.0\.0\.1:\d+: check \Q$setting\E/,
		"$what: the WARNING names $setting");
	like($err, qr/DETAIL:  .*$check/, "$what: the detail says: $check");
	like(rl_status_of($s)->{last_error}, qr/^misconfigured \(\Q$setting\E\)/,
		"$what: last_error is misconfigured");
	ok($t < 2, sprintf("$what: answered in %.0f ms", $t * 1000));
	$s->quit;
	return $err;
}

# 2. Wrong server name, wrong CA, a CA file that is not there.
refused('wrong server name', [ "SET ratelimit.redis_tls_server_name = 'redis.example.com'" ],
	'did not verify: [Hh]ostname mismatch', 'ratelimit.redis_tls_server_name');
refused('wrong CA', [ "SET ratelimit.redis_tls_ca_file = '$dir/other-ca.crt'" ],
	'did not verify: (unable to get local issuer certificate|self-signed certificate in certificate chain)', 'ratelimit.redis_tls_ca_file');
refused('missing CA file', [ "SET ratelimit.redis_tls_ca_file = '$dir/nothing.crt'" ],
	'could not load the certificate authorities', 'ratelimit.redis_tls_ca_file');
is((run($s, allow('tls:b')))[0], 't', 'settings reset: answers again');

# 3. A server that requires client certificates.
is(cli('CONFIG', 'SET', 'tls-auth-clients', 'yes'), 'OK', 'server now requires client certificates');
my $nocert = refused('no client certificate', [],
	'certificate required', 'ratelimit.redis_tls_cert_file and ratelimit.redis_tls_key_file');
refused('a client certificate from another CA', [
		"SET ratelimit.redis_tls_cert_file = '$dir/other-ca.crt'",
		"SET ratelimit.redis_tls_key_file = '$dir/other-ca.key'" ],
	'alert', 'ratelimit.redis_tls_cert_file and ratelimit.redis_tls_key_file');
refused('a certificate without its key', [ "SET ratelimit.redis_tls_cert_file = '$dir/client.crt'" ],
	'needs both', 'ratelimit.redis_tls_cert_file and ratelimit.redis_tls_key_file');
run($s, "SET ratelimit.redis_tls_cert_file = '$dir/client.crt'");
run($s, "SET ratelimit.redis_tls_key_file = '$dir/client.key'");
my @got = map { (run($s, allow('tls:c')))[0] } 1 .. 3;
is("@got", 't t f', 'with the client certificate: exact answers');
run($s, 'RESET ALL');
is(cli('CONFIG', 'SET', 'tls-auth-clients', 'no'), 'OK', 'client certificates optional again');

# 4. The wrong protocol on either port: bounded, the policy, distinct errors.
{
	my $s = rl_session($node);
	run($s, "SET ratelimit.failure_mode = 'closed'");
	run($s, "SET ratelimit.redis_port = $plain_port");
	my ($out, $err, $t) = run($s, allow('tls:d', 100));
	is($out, 'f', 'TLS to the plaintext port: the policy');
	like($err, qr/check ratelimit\.redis_tls;.*\n.*DETAIL:  .*TLS handshake failed: .*does not seem to speak TLS|timed out in the TLS handshake/,
		'TLS to the plaintext port: a TLS handshake error');
	ok($t < 1.5, sprintf('TLS to the plaintext port: within the connect timeout (%.0f ms)', $t * 1000));
	note $err;
	$s->quit;

	$s = rl_session($node);
	run($s, "SET ratelimit.failure_mode = 'closed'");
	run($s, "SET ratelimit.redis_port = $tls_port");
	run($s, 'SET ratelimit.redis_tls = off');
	($out, $err, $t) = run($s, allow('tls:d', 100));
	is($out, 'f', 'plaintext to the TLS port: the policy');
	like($err, qr/WARNING:  08006: Redis server 127\.0\.0\.1:$tls_port is unavailable/,
		'plaintext to the TLS port: an outage WARNING');
	unlike($err, qr/TLS handshake/, 'plaintext to the TLS port: not the TLS error');
	ok($t < 1.5, sprintf('plaintext to the TLS port: within the timeouts (%.0f ms)', $t * 1000));
	note $err;
	$s->quit;
}

# 5. A stalled TLS server: cancel and statement_timeout end the handshake
# and the read, whatever the Redis timeouts say.
{
	my $h = rl_session($node);    # no link yet: will stall in the handshake
	my $r = rl_session($node);    # a link: will stall in the read
	is((run($r, allow('tls:e', 100)))[0], 't', 'stall: a warm link');
	for my $x ($h, $r)
	{
		run($x, 'SET ratelimit.connect_timeout = 60000');
		run($x, 'SET ratelimit.command_timeout = 60000');
	}
	kill 'STOP', $redis_pid;

	for my $case ([ $h, 'mid-handshake' ], [ $r, 'mid-read' ])
	{
		my ($x, $what) = @$case;
		my $pid = pid_of($x);
		rl_start($x, allow('tls:e', 100));
		ok(defined rl_wait_extension($mon, $pid), "stall $what: waits on Redis");
		my $t0 = time;
		run($mon, "SELECT pg_cancel_backend($pid)");
		my ($out, $err) = rl_finish($x);
		my $t = time - $t0;
		like($err, qr/ERROR:  57014: canceling statement due to user request/,
			"stall $what: pg_cancel_backend ends it");
		is($out, '', "stall $what: no answer row");
		ok($t < 2, sprintf("stall $what: cancel took %.0f ms", $t * 1000));
		fact('figure.026', sprintf('stalled TLS server, %s: pg_cancel_backend to ERROR in %.0f ms',
				$what, $t * 1000));
	}
	# The cancel dropped $r's link: it stalls in the handshake now, so warm
	# a third session to stall in the read under statement_timeout.
	kill 'CONT', $redis_pid;
	my $q = rl_session($node);
	is((run($q, allow('tls:e', 100)))[0], 't', 'stall: another warm link');
	run($q, 'SET ratelimit.command_timeout = 60000');
	kill 'STOP', $redis_pid;
	for my $case ([ $h, 'mid-handshake' ], [ $q, 'mid-read' ])
	{
		my ($x, $what) = @$case;
		run($x, "SET statement_timeout = '300ms'");
		my ($out, $err, $t) = run($x, allow('tls:e', 100));
		like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
			"stall $what: statement_timeout ends it");
		is($out, '', "stall $what: no answer row under statement_timeout");
		ok($t < 2, sprintf("stall $what: statement_timeout after %.0f ms", $t * 1000));
		run($x, 'RESET statement_timeout');
	}
	kill 'CONT', $redis_pid;
	$_->quit for ($h, $r, $q);

	# A handshake cut short is dropped, not kept as a link: once the
	# server is back the next call connects afresh and Redis answers it
	# (failure_mode closed: no fail-open 't').
	my $x = rl_session($node);
	run($x, 'SET ratelimit.connect_timeout = 60000');
	run($x, "SET ratelimit.failure_mode = 'closed'");
	my $xpid = pid_of($x);
	kill 'STOP', $redis_pid;
	rl_start($x, allow('tls:e2', 100));
	ok(defined rl_wait_extension($mon, $xpid), 'handshake cut short: waits on Redis');
	run($mon, "SELECT pg_cancel_backend($xpid)");
	my (undef, $xerr) = rl_finish($x);
	like($xerr, qr/57014/, 'handshake cut short: cancelled');
	kill 'CONT', $redis_pid;
	is((run($x, allow('tls:e2', 100)))[0], 't',
		'after a handshake cut short: a fresh, authenticated link answers');
	$x->quit;
}

# 6. A restarted server: the next call after the retry interval reconnects.
{
	is((run($s, allow('tls:f', 100)))[0], 't', 'restart: answered before');
	redis_kill();
	redis_start();
	my $ok = rl_wait_for(sub { (run($s, allow('tls:f2', 100)))[0] eq 't'
		  && rl_status_of($s)->{connected} eq 't' }, 10);
	ok(defined $ok, 'restart: answers again over TLS');
	my @keys = grep { /tls:f2/ } split /\n/, cli('KEYS', '*') // '';
	is(scalar(@keys), 1, 'restart: counted on the new server');
}

# 6b. The CA and the server's certificate rotated in place: new files
# moved over the same paths (new inodes), the server restarted with them.
# The long-lived session $s, whose TLS context read the old CA, verifies
# the new certificate at its first call: Redis answers at once, in the
# same backend.  The CA files are padded to one size (PEM ignores what
# lies outside its blocks) and given one modification time, for 6c.
my $fixed_mtime = int(time) - 3600;

sub pad_to
{
	my ($file, $size) = @_;
	my $pem = slurp_file($file);
	die "$file is larger than $size bytes" if length($pem) > $size;
	open my $fh, '>', $file or die "$file: $!";
	print $fh $pem . ("\n" x ($size - length($pem)));
	close $fh;
	return;
}

# A new CA and a server certificate it signs, in $dir/$name.
sub new_certs
{
	my ($name) = @_;
	my $new = "$dir/$name";
	mkdir $new or die "$new: $!";
	rl_tls_ca($new, 'ca');
	rl_tls_cert($new, 'server', 'ca', 2,
		"subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth");
	pad_to("$new/ca.crt", 4096);
	return $new;
}

my $rot = "SELECT allowed, remaining FROM rl_allow('tls:rot', 'fixed_window', 100, '1 hour')";
{
	my $pid = pid_of($s);
	is((run($s, $rot))[0], 't|99', 'rotation: answered before');
	my $new = new_certs('rot1');
	for my $f (qw(ca.crt server.crt server.key))
	{
		rename("$new/$f", "$dir/$f") or die "rename $f: $!";
	}
	utime($fixed_mtime, $fixed_mtime, "$dir/ca.crt") or die "utime: $!";
	redis_kill();
	redis_start();
	my ($out, $err) = run($s, $rot);
	# The restarted server starts empty (no persistence): 99 again.
	is($out, 't|99', 'rotation: the first call after the restart verifies the new certificate');
	unlike($err, qr/WARNING/, 'rotation: no failure on the way') or diag($err);
	is(pid_of($s), $pid, 'rotation: the same PostgreSQL session');
}

# 6c. Rotated again, the new CA written over the old file in place, its
# size and modification time kept (a copy that keeps times can do this):
# the file looks as the context read it, so the first connection fails
# to verify the new certificate.  That failure drops the context: the
# next attempt, after retry_interval (100 ms), reads the files again.
{
	my $new = new_certs('rot2');
	my $pem = slurp_file("$new/ca.crt");
	my $ino = (stat "$dir/ca.crt")[1];
	open my $fh, '+<', "$dir/ca.crt" or die "ca.crt: $!";
	print $fh $pem;
	close $fh;
	utime($fixed_mtime, $fixed_mtime, "$dir/ca.crt") or die "utime: $!";
	my @st = stat "$dir/ca.crt";
	is("$st[1] $st[7] $st[9]", "$ino 4096 $fixed_mtime",
		'rotation in place: the CA file keeps its inode, size and time');
	for my $f (qw(server.crt server.key))
	{
		rename("$new/$f", "$dir/$f") or die "rename $f: $!";
	}
	redis_kill();
	redis_start();
	my ($o1) = run($s, $rot);
	is($o1, 't|', 'rotation in place: the first call fails to verify, the policy answers');
	like(rl_status_of($s)->{last_error}, qr/did not verify/, 'rotation in place: last_error says why');
	usleep(150_000);
	my ($o2, $e2) = run($s, $rot);
	is($o2, 't|99', 'rotation in place: the next attempt reads the CA again and verifies')
	  or diag($e2);
}

# 7. The password: in no message, log line or CLIENT LIST.
{
	my $list = cli('CLIENT', 'LIST') // '';
	ok($list =~ /name=pg:/, 'CLIENT LIST shows our clients');
	unlike($list, qr/\Q$secret\E/, 'the password is not in CLIENT LIST');
	unlike($all_err, qr/\Q$secret\E/, 'the password is in no message to the client');
	like($all_err, qr/WARNING/, 'messages were collected');
	unlike(slurp_file($node->logfile), qr/\Q$secret\E/, 'the password is not in the server log');
}

$s->quit;
$mon->quit;
$node->stop;
done_testing();
