# test/perl/RLRedis.pm
#
# Helpers for the TAP suites under test/t: a throwaway redis-server on a
# free loopback port (16400-16499) that the suite can stall, kill and
# restart, and a PostgreSQL cluster configured to use it.
#
# RL_SERVER=valkey runs every suite against Valkey instead: rl_bin('server')
# and rl_bin('cli') name the programs to run (valkey-server, valkey-cli),
# here and in RLCluster, RLSentinel and the suites that start their own.
#
# Every server started here is killed in an END block, also when the test
# dies, so no Redis outlives its suite.

package RLRedis;

use strict;
use warnings;

use Exporter 'import';
use IO::Socket::INET;
use IO::Socket::UNIX;
use Socket qw(SOCK_STREAM);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::Builder;
use Time::HiRes qw(time usleep);

our @EXPORT_OK = qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_for
  rl_load rl_status_of rl_wait_extension proc_alive fact fault_mark fault_done
  rl_bin);

my @started;

our $SERVER = $ENV{RL_SERVER} || 'redis';
die "RL_SERVER is \"$SERVER\": redis or valkey\n"
  unless $SERVER eq 'redis' || $SERVER eq 'valkey';

# The program of the server under test for a part: 'server', 'cli'.
sub rl_bin
{
	my ($part) = @_;
	return "$SERVER-$part";
}

# Cluster->init runs pg_regress --config-auth; PGXS's prove_installcheck
# names it in PG_REGRESS, a bare prove does not.
if (!$ENV{PG_REGRESS})
{
	my $pgxs = `pg_config --pgxs`;
	chomp $pgxs;
	(my $dir = $pgxs) =~ s{/src/makefiles/pgxs\.mk$}{};
	$ENV{PG_REGRESS} = "$dir/src/test/regress/pg_regress";
}

# RLRedis->new(name => 'main', args => [...]): starts a redis-server
# (server => 'valkey': a valkey-server, whatever RL_SERVER says).
# Options for a server in another network namespace (RLNetns): bind (its
# address, instead of 127.0.0.1), wrap (a command prefix that runs it
# there, e.g. nsenter) and unixsocket (the suite then talks to it over a
# Unix socket in its directory, which no network fault touches).
sub new
{
	my ($class, %opt) = @_;
	my $self = bless {
		name => $opt{name} // 'redis',
		args => $opt{args} // [],
		dir => PostgreSQL::Test::Utils::tempdir,
		auth => [],
		bind => $opt{bind} // '127.0.0.1',
		wrap => $opt{wrap} // [],
		server => $opt{server} // $SERVER,
	}, $class;
	$self->{socket} = "$self->{dir}/$self->{name}.sock" if $opt{unixsocket};
	push @started, $self;
	my $first = 16400 + ($$ % 100);
	for my $i (0 .. 99)
	{
		my $port = 16400 + (($first - 16400 + $i) % 100);
		next unless port_free($port);
		$self->{port} = $port;
		return $self if $self->start;
	}
	die "no free port for redis-server in 16400-16499";
}

# True if nothing listens on 127.0.0.1:port.
sub port_free
{
	my ($port) = @_;
	my $s = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => $port,
		Proto => 'tcp',
		Listen => 1,
		ReuseAddr => 1);
	return 0 unless $s;
	close $s;
	return 1;
}

# Starts (or restarts) the server on its port; true once it is ours and
# answers.
sub start
{
	my ($self) = @_;
	my $pidfile = "$self->{dir}/$self->{name}.pid";
	unlink $pidfile;
	IPC::Run::run [
		@{ $self->{wrap} }, $self->program('server'), '--port', $self->{port},
		'--bind', $self->{bind}, '--save', '', '--appendonly', 'no',
		($self->{socket} ? ('--unixsocket', $self->{socket}) : ()),
		# Another address is a private namespace's (RLNetns): no password.
		($self->{bind} ne '127.0.0.1' ? ('--protected-mode', 'no') : ()),
		'--daemonize', 'yes', '--dir', $self->{dir},
		'--pidfile', $pidfile,
		'--logfile', "$self->{dir}/$self->{name}.log",
		# A replica's first sync starts at once, not after the 5 s a
		# master waits by default for more replicas to share it.
		'--repl-diskless-sync-delay', 0,
		'--enable-debug-command', 'local', @{ $self->{args} }
	  ],
	  '>', \my $out, '2>', \my $err;
	for (1 .. 100)
	{
		if (-s $pidfile)
		{
			my $reply = $self->cli('CONFIG', 'GET', 'pidfile') // '';
			if ($reply =~ /\Q$pidfile\E/)
			{
				open my $fh, '<', $pidfile or die;
				chomp($self->{pid} = <$fh>);
				close $fh;
				return 1;
			}
		}
		usleep(50_000);
	}
	# Someone took the port first, or the server died.
	$self->kill9 if $self->{pid};
	return 0;
}

sub port { $_[0]->{port} }

# This server's program for a part ('server', 'cli'); objects RLCluster
# and RLSentinel make themselves run RL_SERVER's.
sub program { ($_[0]->{server} // $SERVER) . "-$_[1]" }
sub host { $_[0]->{bind} }
sub pid { $_[0]->{pid} }
sub logfile { "$_[0]->{dir}/$_[0]->{name}.log" }

# redis-cli's arguments to reach the server.
sub cli_target
{
	my ($self) = @_;
	return $self->{socket} ? ('-s', $self->{socket}) : ('-p', $self->{port});
}

# Credentials redis-cli should use from now on, e.g. ('-a', 'pw').
sub set_auth
{
	my ($self, @auth) = @_;
	$self->{auth} = [@auth];
}

# Runs one command with redis-cli; its output without the last newline.
sub cli
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run [ $self->program('cli'), $self->cli_target,
			@{ $self->{auth} }, '--no-auth-warning', @args ],
		  '<', \undef, '>', \$out, '2>', \$err,
		  IPC::Run::timeout(15);
	};
	return undef if $@;
	chomp $out;
	return $out;
}

# Starts redis-cli in the background (e.g. a long script); returns the
# IPC::Run harness.
sub cli_bg
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start [ $self->program('cli'), $self->cli_target,
		@{ $self->{auth} }, '--no-auth-warning', @args ],
	  '<', \undef, '>', \$out, '2>', \$err;
}

# One command over a connection kept open between calls (binary safe,
# much faster than a redis-cli per command).  The reply: a string, a
# number, undef for a nil, an array ref for an array; an error reply is
# returned as an RLRedis::Error (a blessed ref to its text).  The link is
# reopened after the server went away.
sub cmd
{
	my ($self, @args) = @_;
	# A server that went away must give an error here, not kill the test.
	local $SIG{PIPE} = 'IGNORE';
	for my $try (1 .. 2)
	{
		my $sock = $self->{sock} //= $self->{socket}
		  ? IO::Socket::UNIX->new(Peer => $self->{socket}, Type => SOCK_STREAM)
		  : IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $self->{port},
			Proto => 'tcp',
			Timeout => 5);
		die "cannot connect to redis-server on port $self->{port}: $!"
		  unless $sock;
		my $req = '*' . scalar(@args) . "\r\n";
		for my $a (@args)
		{
			utf8::encode($a) if utf8::is_utf8($a);
			$req .= '$' . length($a) . "\r\n$a\r\n";
		}
		my $reply = eval {
			$sock->print($req) or die "write: $!";
			resp_read($sock);
		};
		return $reply unless $@;
		delete $self->{sock};
		die "redis-server on port $self->{port}: $@" if $try == 2;
	}
}

# Closes the connection cmd() keeps (it would count as a client).
sub cmd_close
{
	my ($self) = @_;
	close(delete $self->{sock}) if $self->{sock};
}

sub resp_line
{
	my ($sock) = @_;
	local $/ = "\r\n";
	my $line = <$sock>;
	die "connection closed" unless defined $line;
	chomp $line;
	return $line;
}

sub resp_read
{
	my ($sock) = @_;
	my $line = resp_line($sock);
	my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
	return $rest if $type eq '+';
	return $rest + 0 if $type eq ':';
	return bless(\$rest, 'RLRedis::Error') if $type eq '-';
	if ($type eq '$')
	{
		return undef if $rest < 0;
		my $buf = '';
		while (length($buf) < $rest + 2)
		{
			my $n = read($sock, $buf, $rest + 2 - length($buf), length($buf));
			die "connection closed" unless $n;
		}
		return substr($buf, 0, $rest);
	}
	if ($type eq '*')
	{
		return undef if $rest < 0;
		return [ map { resp_read($sock) } 1 .. $rest ];
	}
	die "unexpected RESP reply: $line";
}

# Every key of the current database (binary safe, unlike redis-cli --scan).
sub scan_all
{
	my ($self, $pattern) = @_;
	my ($cursor, @keys) = (0);
	do
	{
		my $r = $self->cmd('SCAN', $cursor, 'COUNT', 1000,
			defined $pattern ? ('MATCH', $pattern) : ());
		($cursor, my $batch) = @$r;
		push @keys, @$batch;
	} while ($cursor ne '0');
	return @keys;
}

# Field of INFO <section>, e.g. info('clients', 'connected_clients').
sub info
{
	my ($self, $section, $field) = @_;
	my $info = $self->cli('INFO', $section) // '';
	return $1 if $info =~ /^\Q$field\E:(.*?)\r?$/m;
	return undef;
}

# The server's own version: Valkey's valkey_version (its redis_version
# stays 7.2.4), else redis_version.
sub version
{
	my ($self) = @_;
	return $self->info('server', 'valkey_version')
	  // $self->info('server', 'redis_version');
}

# The numbers a limiter's state string holds (lua/common.lua rl_state:
# a tag byte, then little-endian doubles; gcra's has four), as exact
# integer texts; empty when the key holds no such string.
sub limiter_state
{
	my ($self, $key) = @_;
	return state_numbers($self->cmd('GET', $key));
}

# The same numbers from a GET reply (RLRedis::state_numbers($v)).
sub state_numbers
{
	my ($v) = @_;
	return () unless defined $v && !ref $v && length($v) % 8 == 1;
	my ($tag, @n) = unpack('C d<*', $v);
	return () unless $tag == 1;
	return map { sprintf('%.0f', $_) } @n;
}

# Units a fixed window's state says are used; undef when there is none.
sub fw_used
{
	my ($self, $key) = @_;
	my @n = $self->limiter_state($key);
	return @n ? $n[1] : undef;
}

# {calls => n, failed_calls => n, ...} of INFO commandstats for cmd.
sub cmdstat
{
	my ($self, $cmd) = @_;
	my $info = $self->cli('INFO', 'commandstats') // '';
	my %h = (calls => 0, failed_calls => 0, rejected_calls => 0);
	if ($info =~ /^cmdstat_\Q$cmd\E:(.*?)\r?$/m)
	{
		%h = (%h, map { split /=/, $_, 2 } split /,/, $1);
	}
	return \%h;
}

# Script runs Redis counted, however sent: FCALL (Redis 7.0 and later),
# EVALSHA, or EVAL after NOSCRIPT; a NOSCRIPT or "Function not found"
# (failed_calls) did not run.  With all => 1, the calls, failed or not.
sub script_runs
{
	my ($self, %o) = @_;
	my $runs = 0;
	for my $cmd (qw(fcall evalsha eval))
	{
		my $st = $self->cmdstat($cmd);
		$runs += $st->{calls};
		$runs -= $st->{failed_calls} if $cmd ne 'eval' && !$o{all};
	}
	return $runs;
}

# Names of the clients in CLIENT LIST.
sub client_names
{
	my ($self) = @_;
	my $list = $self->cli('CLIENT', 'LIST') // '';
	return [ map { /\bname=(\S*)/ ? $1 : () } split /\n/, $list ];
}

# SIGSTOP: the kernel still accepts connections, replies never come.
sub stall { kill 'STOP', $_[0]->{pid} }
sub resume { kill 'CONT', $_[0]->{pid} }

# Kills the server at once and waits for it to be gone.
sub kill9
{
	my ($self) = @_;
	my $pid = $self->{pid} or return;
	kill 'KILL', $pid;
	for (1 .. 200)
	{
		last unless kill 0, $pid;
		# A daemonized child is not ours to reap; just wait.
		usleep(20_000);
	}
	delete $self->{pid};
}

END
{
	my $rc = $?;
	$_->kill9 for @started;
	$? = $rc;
}

# rl_node(name, redis, extra conf): a started cluster with the extension,
# pointed at the given Redis with short timeouts.
sub rl_node
{
	my ($name, $redis, $extra) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	my $port = $redis->port;
	my $host = $redis->host;
	$node->append_conf(
		'postgresql.conf', qq{
max_connections = 100
shared_preload_libraries = 'ratelimit'
ratelimit.redis_host = '$host'
ratelimit.redis_port = $port
ratelimit.connect_timeout = 300
ratelimit.command_timeout = 300
ratelimit.retry_interval = 200
} . ($extra // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
	return $node;
}

# A background psql session that keeps going after errors and prints
# SQLSTATEs.
sub rl_session
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	return $s;
}

# Runs SQL in a background session: (stdout, stderr, seconds taken).
sub rl_run
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $t0 = time;
	my $out = $s->query($sql);
	my $elapsed = time - $t0;
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err, $elapsed);
}

# Sends SQL in a background session without waiting for its end, so the
# test can act on the backend meanwhile; rl_finish collects the result.
sub rl_start
{
	my ($s, $sql) = @_;
	my $n = $s->{query_cnt}++;
	$s->{rl_banner} = "background_psql: QUERY_SEPARATOR $n:";
	$s->{stdout} = '';
	$s->{stderr} = '';
	$s->{stdin} .= "$sql\n;\n\\echo '$s->{rl_banner}'\n\\warn '$s->{rl_banner}'\n";
	$s->{run}->pump_nb;
}

# (stdout, stderr) of the query rl_start sent, once it has ended.
sub rl_finish
{
	my ($s) = @_;
	my $banner = qr/\r?\n?\Q$s->{rl_banner}\E\r?\n/;
	$s->{run}->pump
	  until ($s->{stdout} =~ $banner && $s->{stderr} =~ $banner)
	  || $s->{timeout}->is_expired;
	die "psql query timed out" if $s->{timeout}->is_expired;
	my ($out, $err) = ($s->{stdout}, $s->{stderr});
	$out =~ s/$banner//;
	$err =~ s/$banner//;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return ($out, $err);
}

# rl_status() of a session as a hash of its columns ('' for NULL).
sub rl_status_of
{
	my ($s) = @_;
	my @cols = qw(endpoint connected server_version last_error last_error_at
	  calls allowed denied fail_open fail_closed failures connects
	  script_loads cached);
	my ($out) = rl_run($s, 'SELECT ' . join(', ', @cols) . ' FROM rl_status()');
	my %st;
	@st{@cols} = split /\|/, $out // '', -1;
	return \%st;
}

# Seconds until the backend pid waits on Redis (wait_event Extension), as
# seen from the session mon; undef after 10 s.
sub rl_wait_extension
{
	my ($mon, $pid) = @_;
	return rl_wait_for(
		sub {
			(rl_run($mon,
				"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid"))[0]
			  eq 'Extension';
		},
		10);
}

# True while a process runs; an exited one waiting to be reaped (state Z)
# counts as gone, since who reaps an orphan, and when, is not ours.
sub proc_alive
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh> // '';
	close $fh;
	return $stat =~ /^\d+ \(.*\) ([A-Za-z])/ && $1 ne 'Z' && $1 ne 'X';
}

# Polls code until it returns true or timeout seconds pass; the seconds
# it took, or undef on timeout.
sub rl_wait_for
{
	my ($code, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < $timeout)
	{
		return time - $t0 if $code->();
		usleep(10_000);
	}
	return undef;
}

# A load that lasts until the test stops it: rl_load(node, clients,
# script) runs the pgbench script (one call per run of it, without
# BEGIN/COMMIT) from that many pgbench clients until the returned sub is
# called.  A load of a fixed number of calls or seconds may end before a
# fault staged during it has taken effect, on a fast machine or a slow
# one; this one spans whatever the test waits for meanwhile, by
# construction.  pgbench runs at most max_s seconds (180 unless given), a
# bound for a test that died before stopping it.
# The sub stops the load: it inserts a stop row; each client, at its next
# run of the script, sees it and reports the calls it made instead of
# making one more, so once every client has reported, no call is in
# flight and none will start, and pgbench is ended.  It waits at most
# timeout seconds (60 unless given) and returns (clients that ran clean
# until stopped, the calls they made, what went wrong).
my $rl_loads = 0;

sub rl_load
{
	my ($node, $clients, $script, %o) = @_;
	my $max_s = $o{max_s} // 180;
	my $n = ++$rl_loads;
	my $stop = "rl_load_stop_$n";
	my $base = $node->basedir . "/rl_load_$n";
	$node->safe_psql('postgres', "CREATE TABLE $stop (client int PRIMARY KEY, calls bigint)");
	PostgreSQL::Test::Utils::append_to_file("$base.sql",
		"SELECT (EXISTS (SELECT FROM $stop WHERE client < 0))::int AS rl_stopped \\gset\n"
		  . "\\if :rl_stopped = 1\n"
		  . "INSERT INTO $stop VALUES (:client_id, :rl_calls) ON CONFLICT (client) DO NOTHING;\n"
		  . "\\sleep 10 ms\n"
		  . "\\else\n"
		  . "$script\n"
		  . "\\set rl_calls :rl_calls + 1\n"
		  . "\\endif\n");
	# Files, not pipes: nothing has to read pgbench's output while the
	# test waits on something else.
	my $h = IPC::Run::start [
		'pgbench', '-n', '-c', $clients, '-j', ($clients > 1 ? 2 : 1), '-T', $max_s,
		'-D', 'rl_calls=0', '-f', "$base.sql",
		'-h', $node->host, '-p', $node->port, 'postgres'
	  ],
	  '<', '/dev/null', '>', "$base.out", '2>', "$base.err";
	return sub {
		my ($timeout) = @_;
		$timeout //= 60;
		$node->safe_psql('postgres', "INSERT INTO $stop VALUES (-1, NULL)");
		my $acked = sub {
			$node->safe_psql('postgres', "SELECT count(*) FROM $stop WHERE client >= 0");
		};
		my $t0 = time;
		my @wrong;
		while (1)
		{
			last if $acked->() == $clients;
			if (!$h->pumpable)
			{
				push @wrong, 'pgbench ended before every client was stopped';
				last;
			}
			if (slurp_file("$base.err") =~ /aborted|\b(?:ERROR|FATAL):/)
			{
				push @wrong, 'a client failed';
				last;
			}
			if (time - $t0 > $timeout)
			{
				push @wrong, "not every client stopped within $timeout s";
				last;
			}
			usleep(10_000);
		}
		$h->kill_kill(grace => 5) if $h->pumpable;
		$h->finish;
		my ($clean, $calls) = split /\|/, $node->safe_psql('postgres',
			"SELECT count(*), coalesce(sum(calls), 0) FROM $stop WHERE client >= 0");
		my $err = slurp_file("$base.err");
		# WARNINGs of policy answers are expected; an error is not.
		push @wrong, "pgbench: $err" if @wrong || $err =~ /aborted|\b(?:ERROR|FATAL):/;
		$clean = 0 if @wrong;
		$node->safe_psql('postgres', "DROP TABLE $stop");
		return ($clean, $calls, join("\n", @wrong));
	};
}

# Facts for the closing summary of test/check.sh: each is a line
# "key<TAB>value" appended to the file named by RL_FACTS (nothing happens
# when it is unset, e.g. under a bare prove).  Keys name a figure and the
# suite it came from, e.g. "calls.001"; check.sh adds them up.
sub fact
{
	my ($key, $value) = @_;
	my $file = $ENV{RL_FACTS} or return;
	open my $fh, '>>', $file or return warn "cannot record a fact in $file: $!\n";
	print $fh "$key\t$value\n";
	close $fh;
}

# A fault is "survived" when every test point run while it was staged
# passed: fault_mark() before staging it, fault_done(name, mark) after its
# last check, which records "fault<TAB>name" or "fault_failed<TAB>name".
sub fault_mark
{
	return Test::Builder->new->current_test;
}

sub fault_done
{
	my ($name, $mark) = @_;
	my @summary = Test::Builder->new->summary;
	my @since = @summary[ $mark .. $#summary ];
	my $ok = @since && !grep { !$_ } @since;
	fact($ok ? 'fault' : 'fault_failed', $name);
	return $ok;
}

1;
