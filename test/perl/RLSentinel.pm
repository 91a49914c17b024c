# test/perl/RLSentinel.pm
#
# A real Redis Sentinel topology for the TAP suites: a master, a replica
# and three Sentinels (redis-server --sentinel) on free loopback ports in
# 16600-16699, with passwords on both sides (the data nodes' requirepass,
# the Sentinels' own requirepass), as the reference notes stage it.  The
# data nodes are RLRedis objects (cli, info, cmdstat, kill9 work on them);
# each Sentinel gets a writable config file of its own, since Sentinel
# rewrites it.  down-after-milliseconds is 1000 (a killed master's replica
# is promoted in about 1.4 s) and failover-timeout 5000: Sentinel turns
# an old master that is still a master into a replica after that long
# (10 s with the reference notes' 10000), and starts no second fail-over
# of the same master within twice that.
#
# The Sentinels also monitor the replica under the name "replonly", with
# a down-after of 60 s so that they never act on it during a suite: asking
# for that name yields an address whose ROLE is a replica, which is how a
# suite tests the ROLE check with real Sentinels.  remove_replonly ends
# that before any fail-over (see there).
#
# With tls => {port => P, args => [...]} (028) every data node and
# Sentinel also listens on a TLS port, P, P+1, ... in the order above,
# with the server arguments given (certificate, key, CA), and they speak
# TLS among themselves (tls-replication yes): the Sentinels monitor and
# name the TLS ports, which sentinel_list gives.  The plaintext ports
# stay, for the suite's own inspection (cli, cmdstat).
#
# lone_sentinel starts one more Sentinel that takes commands from anyone
# (no requirepass), as an attacker might find one, and trap a fake master
# that keeps every byte sent to it (025, 028: the Redis password must never
# reach a master an open Sentinel was made to name).
#
# Every process is killed in an END block, also when the test dies.

package RLSentinel;

use strict;
use warnings;

use File::Spec;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

use RLRedis;

my @topologies;

# RLSentinel->new(name => 's25_', password => ..., sentinel_password => ...).
sub new
{
	my ($class, %opt) = @_;
	my $self = bless {
		name => $opt{name} // 'rs',
		password => $opt{password} // 'Redis-Pw-7f3a',
		sentinel_password => $opt{sentinel_password} // 'Sentinel-Pw-91c2',
		data => [],
		sentinels => [],
		tls => $opt{tls},
	}, $class;
	push @topologies, $self;

	# Five consecutive free ports.
	my $base;
	my $first = 16600 + ($$ % 95);
	for my $i (0 .. 94)
	{
		my $try = 16600 + (($first - 16600 + $i) % 95);
		next if grep { !RLRedis::port_free($_) } $try .. $try + 4;
		$base = $try;
		last;
	}
	die "no free run of 5 ports in 16600-16699" unless defined $base;
	$self->{base} = $base;
	my $tls = $self->{tls};
	# The port the Sentinels know a node by: its TLS port under tls.
	my $known = sub { $tls ? $tls->{port} + $_[0] - $base : $_[0] };

	my $pw = $self->{password};
	for my $i (0, 1)
	{
		my $r = bless {
			name => "$self->{name}d$i",
			dir => File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir),
			auth => [ '-a', $pw ],
			bind => '127.0.0.1',
			wrap => [],
			port => $base + $i,
			base_args => [
				'--requirepass', $pw, '--masterauth', $pw,
				'--repl-diskless-sync-delay', 0,
				$tls ? ('--tls-port', $known->($base + $i),
					'--tls-replication', 'yes', @{ $tls->{args} }) : ()
			],
		}, 'RLRedis';
		$r->{args} = [ @{ $r->{base_args} },
			$i == 1 ? ('--replicaof', '127.0.0.1', $known->($base)) : () ];
		push @{ $self->{data} }, $r;
		$r->start or die "redis-server on port $r->{port} did not start";
	}
	$self->wait_synced(30) or die "replica not in sync after 30 s";

	for my $i (0 .. 2)
	{
		my $port = $base + 2 + $i;
		my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir);
		my $s = bless {
			name => "$self->{name}s$i",
			dir => $dir,
			auth => [ '-a', $self->{sentinel_password} ],
			bind => '127.0.0.1',
			wrap => [],
			port => $port,
		}, 'RLRedis';
		my $conf = "$dir/sentinel.conf";
		my $m = $known->($base);
		my $rp = $known->($base + 1);
		if ($tls)
		{
			my %a = @{ $tls->{args} };
			my $t = join '', map { (my $k = $_) =~ s/^--//; "$k $a{$_}\n" } sort keys %a;
			PostgreSQL::Test::Utils::append_to_file($conf,
				"tls-port " . $known->($port) . "\ntls-replication yes\n$t");
		}
		PostgreSQL::Test::Utils::append_to_file($conf, <<EOF);
port $port
bind 127.0.0.1
daemonize yes
pidfile $dir/sentinel.pid
logfile $dir/sentinel.log
dir $dir
requirepass $self->{sentinel_password}
sentinel sentinel-pass $self->{sentinel_password}
sentinel monitor mymaster 127.0.0.1 $m 2
sentinel auth-pass mymaster $pw
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
sentinel monitor replonly 127.0.0.1 $rp 2
sentinel auth-pass replonly $pw
sentinel down-after-milliseconds replonly 60000
sentinel failover-timeout replonly 600000
EOF
		start_sentinel($s, $conf);
		die "sentinel on port $port did not start" unless $s->{pid};
		push @{ $self->{sentinels} }, $s;
	}
	$self->wait_sentinels(30) or die "Sentinels did not see each other and the replica in 30 s";
	return $self;
}

sub data { @{ $_[0]->{data} } }
sub sentinels { @{ $_[0]->{sentinels} } }
sub password { $_[0]->{password} }
sub sentinel_password { $_[0]->{sentinel_password} }

# "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3": for ratelimit.redis_nodes.
sub sentinel_list
{
	my ($self) = @_;
	return join ',', map { '127.0.0.1:' . $self->known_port($_->port) } $self->sentinels;
}

# The port the Sentinels and the extension know a node by (its TLS port
# under tls), and the node of such a port.
sub known_port
{
	my ($self, $port) = @_;
	return $self->{tls} ? $self->{tls}{port} + $port - $self->{base} : $port;
}
sub known_node
{
	my ($self, $port) = @_;
	my ($n) = grep { $self->known_port($_->port) == $port } $self->data;
	return $n;
}

# The data node on a port.
sub node
{
	my ($self, $port) = @_;
	my ($n) = grep { $_->port == $port } $self->data;
	return $n;
}

# The port Sentinel $s names as master of $name (default mymaster).
sub named_by
{
	my ($self, $s, $name) = @_;
	my $r = $s->cli('SENTINEL', 'get-master-addr-by-name', $name // 'mymaster') // '';
	my $n = $r =~ /^127\.0\.0\.1\n(\d+)$/ ? $self->known_node($1) : undef;
	return $n ? $n->port : undef;
}

# The master's data node once every running Sentinel names the same one;
# undef after $timeout seconds.
sub master
{
	my ($self, $timeout) = @_;
	my $t0 = time;
	do
	{
		my %ports = map { ($self->named_by($_) // 'none') => 1 }
		  grep { $_->pid } $self->sentinels;
		my ($p) = keys %ports;
		return $self->node($p) if keys %ports == 1 && $p ne 'none';
		usleep(20_000);
	} while (time - $t0 < ($timeout // 0));
	return undef;
}

# The data node that is not $n.
sub other
{
	my ($self, $n) = @_;
	my ($o) = grep { $_ != $n } $self->data;
	return $o;
}

# True once every running replica's link to its master is up.
sub wait_synced
{
	my ($self, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < ($timeout // 30))
	{
		my $ok = 1;
		for my $n (grep { $_->pid } $self->data)
		{
			my $info = $n->cli('INFO', 'replication') // '';
			next unless $info =~ /^role:slave/m;
			$ok = 0, last unless $info =~ /^master_link_status:up/m;
		}
		return time - $t0 if $ok;
		usleep(50_000);
	}
	return undef;
}

# True once every Sentinel knows the two others and one healthy replica
# of mymaster, so that a fail-over can be agreed on and has a target.
sub wait_sentinels
{
	my ($self, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < ($timeout // 30))
	{
		my $ok = 1;
		for my $s ($self->sentinels)
		{
			my $m = $s->cli('SENTINEL', 'master', 'mymaster') // '';
			my %f = split /\n/, $m;
			my $r = $s->cli('SENTINEL', 'replicas', 'mymaster') // '';
			$ok = 0, last
			  unless ($f{'num-other-sentinels'} // 0) == 2
			  && ($f{'num-slaves'} // 0) >= 1
			  && ($f{flags} // '') eq 'master'
			  && $r =~ /\nflags\nslave\n/;
		}
		return time - $t0 if $ok;
		usleep(100_000);
	}
	return undef;
}

# Stops monitoring "replonly" (SENTINEL REMOVE on every Sentinel): once
# the replica is promoted, a Sentinel asked whether 127.0.0.1:<its port>
# is down would answer for "replonly", never down, and no fail-over of the
# new master would reach its quorum.
sub remove_replonly
{
	my ($self) = @_;
	for my $s ($self->sentinels)
	{
		my $r = $s->cli('SENTINEL', 'REMOVE', 'replonly') // '';
		die "SENTINEL REMOVE replonly failed: $r" unless $r eq 'OK';
	}
}

# SENTINEL FAILOVER through the first Sentinel; dies on a refusal.
sub failover
{
	my ($self) = @_;
	my $r = ($self->sentinels)[0]->cli('SENTINEL', 'FAILOVER', 'mymaster') // '';
	die "SENTINEL FAILOVER failed: $r" unless $r eq 'OK';
}

# Restarts data node $n as a master (no replicaof), as a stale master that
# comes back after a fail-over would.
sub restart_as_master
{
	my ($self, $n) = @_;
	$n->{args} = [ @{ $n->{base_args} } ];
	$n->start or die "redis-server on port " . $n->port . " did not restart";
}

# Starts the Sentinel $s (an RLRedis) from its config file $conf, which
# daemonizes it with its pid file in $s->{dir}, and waits up to 5 s for it
# to answer; $s->{pid} is then set.  Returns what redis-server wrote to
# stderr, for the caller's message when it did not start.
sub start_sentinel
{
	my ($s, $conf) = @_;
	IPC::Run::run [ RLRedis::rl_bin('server'), $conf, '--sentinel' ],
	  '>', \my $out, '2>', \my $err;
	for (1 .. 100)
	{
		if (-s "$s->{dir}/sentinel.pid" && defined $s->cli('PING'))
		{
			open my $fh, '<', "$s->{dir}/sentinel.pid" or die;
			chomp($s->{pid} = <$fh>);
			close $fh;
			last;
		}
		usleep(50_000);
	}
	return $err // '';
}

# A lone Sentinel without a password, on the first free port from 16690
# (under tls => {...} also on TLS port $opt{tls_port}), with the config
# lines $opt{conf} (users, monitors).  Killed by kill_lone, or with the
# topology.
sub lone_sentinel
{
	my ($self, %opt) = @_;
	my ($port) = grep { RLRedis::port_free($_) } 16690 .. 16699;
	die 'no free port for a lone Sentinel in 16690-16699' unless defined $port;
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir);
	my $s = bless {
		name => "$self->{name}lone",
		dir => $dir,
		auth => [],
		bind => '127.0.0.1',
		wrap => [],
		port => $port,
	}, 'RLRedis';
	my $conf = "$dir/sentinel.conf";
	if ($self->{tls})
	{
		my %a = @{ $self->{tls}{args} };
		my $t = join '', map { (my $k = $_) =~ s/^--//; "$k $a{$_}\n" } sort keys %a;
		PostgreSQL::Test::Utils::append_to_file($conf,
			"tls-port $opt{tls_port}\ntls-replication yes\n$t");
	}
	PostgreSQL::Test::Utils::append_to_file($conf,
		"port $port\nbind 127.0.0.1\ndaemonize yes\n"
		  . "pidfile $dir/sentinel.pid\nlogfile $dir/sentinel.log\ndir $dir\n"
		  . ($opt{conf} // ''));
	my $err = start_sentinel($s, $conf);
	die "lone Sentinel on port $port did not start: $err" unless $s->{pid};
	push @{ $self->{lone} }, $s;
	return $s;
}

sub kill_lone
{
	my ($self) = @_;
	$_->kill9 for @{ $self->{lone} // [] };
}

# The fake master's code: listens on a free loopback port (written to
# FILE.port), answers nothing, appends every byte of every connection to
# FILE.
my $trap_code = q{
use strict;
use IO::Select;
use IO::Socket::INET;
my ($file) = @ARGV;
my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
	Listen => 64, ReuseAddr => 1) or die "listen: $!";
open my $out, '>>', $file or die "$file: $!";
binmode $out;
$out->autoflush(1);
open my $p, '>', "$file.port.tmp" or die;
print $p $l->sockport, "\n";
close $p;
rename "$file.port.tmp", "$file.port" or die;
my $sel = IO::Select->new($l);
while (1)
{
	for my $h ($sel->can_read)
	{
		if ($h == $l)
		{
			my $c = $l->accept;
			$sel->add($c) if $c;
			next;
		}
		my $n = sysread($h, my $buf, 65536);
		if ($n)
		{
			print $out $buf;
			next;
		}
		$sel->remove($h);
		close $h;
	}
}
};

# A fake master (see $trap_code): {port, file}.  trap_bytes reads what it
# was sent, trap_stop ends it.
sub trap
{
	my ($self) = @_;
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir);
	my $file = "$dir/trap.bytes";
	my ($o, $e) = ('', '');
	my $run = IPC::Run::start [ 'perl', '-e', $trap_code, $file ],
	  '<', \undef, '>', \$o, '2>', \$e;
	for (1 .. 500)
	{
		last if -s "$file.port";
		usleep(10_000);
	}
	open my $fh, '<', "$file.port" or die "the trap did not start: $e";
	chomp(my $port = <$fh>);
	close $fh;
	my $trap = { port => $port, file => $file, run => $run, marks => 0 };
	push @{ $self->{traps} }, $trap;
	return $trap;
}

# Everything the trap was sent so far: a marker is sent last and waited
# for, so what reached its socket before has been read.
sub trap_bytes
{
	my ($self, $trap) = @_;
	my $mark = 'TRAP-MARK-' . ++$trap->{marks} . "\n";
	my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $trap->{port})
	  or die "cannot reach the trap: $!";
	print $c $mark;
	close $c;
	my $bytes = '';
	for (1 .. 500)
	{
		$bytes = PostgreSQL::Test::Utils::slurp_file($trap->{file});
		last if index($bytes, $mark) >= 0;
		usleep(10_000);
	}
	die 'the trap did not report its marker' unless index($bytes, $mark) >= 0;
	$bytes =~ s/TRAP-MARK-\d+\n//g;
	return $bytes;
}

sub trap_stop
{
	my ($self, $trap) = @_;
	$trap->{run}->kill_kill if $trap->{run};
	delete $trap->{run};
}

END
{
	my $rc = $?;
	for my $t (@topologies)
	{
		$_->kill9 for @{ $t->{sentinels} }, @{ $t->{data} }, @{ $t->{lone} // [] };
		$t->trap_stop($_) for @{ $t->{traps} // [] };
	}
	$? = $rc;
}

1;
