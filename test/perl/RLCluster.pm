# test/perl/RLCluster.pm
#
# A real Redis Cluster for the TAP suites: 3 masters and 3 replicas (by
# default) on free loopback ports in 16500-16599, made with
# "redis-cli --cluster create ... --cluster-replicas 1", ready once every
# node reports cluster_state:ok.  Each node is an RLRedis object (cli, cmd,
# info, cmdstat, stall, kill9 work on it).  Helpers move a slot by hand
# (MIGRATING/IMPORTING, for ASK; then MIGRATE and SETSLOT NODE, for
# MOVED), fail a master over (CLUSTER FAILOVER on its replica), kill a
# node, and find the node that serves a key.
#
# The cluster bus of the node on port P listens on P+50, so a cluster takes
# two runs of ports inside the block.  cluster-node-timeout is 1000 ms (a
# killed master's replica takes over in about 2.3 s) and
# cluster-require-full-coverage is "no" unless asked otherwise, so the
# other masters keep serving while one shard is down.  Every node is
# killed in an END block, also when the test dies.

package RLCluster;

use strict;
use warnings;

use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

use RLRedis;

my @clusters;

# RLCluster->new(masters => 3, replicas => 1, full_coverage => 0,
# node_args => sub { my ($port) = @_; ... }): node_args gives each node
# more arguments of its own (028 gives each a TLS port).
# In network namespaces (RLNetns): bind => the nodes' address, place =>
# {index => {bind => ..., wrap => [...]}} for nodes elsewhere, unixsocket
# => 1 for the suite's own commands (which then no link slows).
sub new
{
	my ($class, %opt) = @_;
	my $masters = $opt{masters} // 3;
	my $replicas = $opt{replicas} // 1;
	my $count = $masters * (1 + $replicas);
	my $self = bless {
		nodes => [],
		full_coverage => $opt{full_coverage} ? 'yes' : 'no',
		name => $opt{name} // 'rc',
	}, $class;
	push @clusters, $self;

	# A run of $count data ports whose bus ports (+50) are free too.
	my $base;
	my $first = 16500 + ($$ % 50);
	for my $i (0 .. 49)
	{
		my $try = 16500 + (($first - 16500 + $i) % 50);
		next if $try + $count > 16550;
		next if grep { !RLRedis::port_free($_) && 1 }
		  map { ($_, $_ + 50) } $try .. $try + $count - 1;
		$base = $try;
		last;
	}
	die "no free run of $count ports in 16500-16549" unless defined $base;

	for my $i (0 .. $count - 1)
	{
		my $port = $base + $i;
		my $place = $opt{place}{$i} // {};
		my $bind = $place->{bind} // $opt{bind} // '127.0.0.1';
		my $r = bless {
			name => "$self->{name}$i",
			dir => File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir),
			auth => [],
			bind => $bind,
			wrap => $place->{wrap} // [],
			port => $port,
			args => [
				($bind ne '127.0.0.1' ? ('--cluster-announce-ip', $bind) : ()),
				'--cluster-enabled', 'yes',
				'--cluster-port', $port + 50,
				'--cluster-config-file', 'nodes.conf',
				'--cluster-node-timeout', 1000,
				'--cluster-require-full-coverage', $self->{full_coverage},
				# A replica may take over however long it was cut off.
				'--cluster-replica-validity-factor', 0,
				# Replicas sync at once, not after the default 5 s.
				'--repl-diskless-sync-delay', 0,
				@{ $opt{args} // [] },
				$opt{node_args} ? $opt{node_args}->($port) : ()
			],
		}, 'RLRedis';
		$r->{socket} = "$r->{dir}/$r->{name}.sock" if $opt{unixsocket};
		push @{ $self->{nodes} }, $r;
		$r->start or die "redis-server on port $port did not start";
	}

	my ($out, $err) = ('', '');
	IPC::Run::run [
		RLRedis::rl_bin('cli'), '--cluster', 'create',
		(map { $_->host . ':' . $_->port } @{ $self->{nodes} }),
		'--cluster-replicas', $replicas, '--cluster-yes'
	  ],
	  '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60);
	die "redis-cli --cluster create failed:\n$out\n$err" if $?;
	$self->wait_ok(30) or die "cluster not ok after 30 s:\n$out";
	$self->wait_synced(30) or die "replicas not in sync after 30 s";
	return $self;
}

sub nodes { @{ $_[0]->{nodes} } }

# The node on a port.
sub node
{
	my ($self, $port) = @_;
	my ($n) = grep { $_->port == $port } $self->nodes;
	return $n;
}

# Nodes still running.
sub alive { grep { $_->pid } $_[0]->nodes }

# "127.0.0.1:p1,127.0.0.1:p2,...": every node, for ratelimit.redis_nodes.
sub seeds
{
	my ($self) = @_;
	return join ',', map { $_->host . ':' . $_->port } $self->nodes;
}

# True once every running node says cluster_state:ok and all of them agree
# on the owner of every slot (no node mid-handover).
sub wait_ok
{
	my ($self, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < ($timeout // 30))
	{
		my $ok = 1;
		my %maps;
		for my $n ($self->alive)
		{
			my $info = $n->cli('CLUSTER', 'INFO') // '';
			$ok = 0, last unless $info =~ /^cluster_state:ok\r?$/m;
			$maps{ join ' ', map { "$_->[0]-$_->[1]:$_->[2]" } $self->slot_ranges($n) } = 1;
		}
		return time - $t0 if $ok && keys %maps == 1;
		usleep(50_000);
	}
	return undef;
}

# True once every running replica's link to its master is up.
sub wait_synced
{
	my ($self, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < ($timeout // 30))
	{
		my $ok = 1;
		for my $n ($self->alive)
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

# ([start, end, master port], ...) from CLUSTER SLOTS, as node $n sees it.
sub slot_ranges
{
	my ($self, $n) = @_;
	$n //= ($self->alive)[0];
	my $r = eval { $n->cmd('CLUSTER', 'SLOTS') };
	return () unless ref $r eq 'ARRAY';
	return sort { $a->[0] <=> $b->[0] }
	  map { [ $_->[0], $_->[1], $_->[2][1] ] } @$r;
}

# Parsed CLUSTER NODES: {port => {id, port, role, master (id), flags}}.
sub topology
{
	my ($self, $n) = @_;
	$n //= ($self->alive)[0];
	my %t;
	for my $line (split /\n/, $n->cli('CLUSTER', 'NODES') // '')
	{
		my ($id, $addr, $flags, $master) = split / /, $line;
		next unless $addr =~ /:(\d+)@/;
		my $port = $1;
		$t{$port} = {
			id => $id,
			port => $port,
			flags => $flags,
			role => ($flags =~ /master/ ? 'master' : 'replica'),
			master => $master,
			failed => ($flags =~ /fail/ && $flags !~ /pfail/) ? 1 : 0,
		};
	}
	return \%t;
}

sub id_of
{
	my ($self, $n) = @_;
	return $self->topology($n)->{ $n->port }{id};
}

# The running masters that serve slots, in port order.
sub masters
{
	my ($self) = @_;
	my %ports = map { $_->[2] => 1 } $self->slot_ranges;
	return map { $self->node($_) } sort { $a <=> $b } keys %ports;
}

# The replica of master $m.
sub replica_of
{
	my ($self, $m) = @_;
	my $t = $self->topology;
	my $id = $t->{ $m->port }{id};
	my ($r) = grep { $_->{master} eq $id && $_->{flags} !~ /fail/ } values %$t;
	return $r ? $self->node($r->{port}) : undef;
}

# CLUSTER KEYSLOT of a key, as the server computes it.
sub keyslot
{
	my ($self, $key) = @_;
	return ($self->alive)[0]->cmd('CLUSTER', 'KEYSLOT', $key);
}

# CRC16 (XMODEM), the checksum of Redis's key slots, of a string,
# continued from a state (0 to start): keys that share a long head cost
# only their tails (018 and 029 use 900-byte heads).
sub crc16
{
	my ($crc, $str) = @_;
	for my $byte (unpack 'C*', $str)
	{
		$crc ^= $byte << 8;
		for (1 .. 8)
		{
			$crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff : ($crc << 1) & 0xffff;
		}
	}
	return $crc;
}

# The hash slot of a key computed here (CRC16/XMODEM of its hash tag, as
# the cluster spec says), so a test can pick keys of given slots without a
# round trip per key; 018 checks the extension's against CLUSTER KEYSLOT.
sub slot_of
{
	my ($key) = @_;
	if ($key =~ /^[^{]*\{([^}]+)\}/)
	{
		$key = $1;
	}
	return crc16(0, $key) % 16384;
}

# The master that serves a slot (per CLUSTER SLOTS).
sub master_of_slot
{
	my ($self, $slot) = @_;
	for my $r ($self->slot_ranges)
	{
		return $self->node($r->[2]) if $slot >= $r->[0] && $slot <= $r->[1];
	}
	return undef;
}

# The master that serves a key.
sub master_of_key
{
	my ($self, $key) = @_;
	return $self->master_of_slot($self->keyslot($key));
}

# A command run on the master that serves the key (binary safe).
sub key_cmd
{
	my ($self, $key, @cmd) = @_;
	return $self->master_of_key($key)->cmd(@cmd);
}

# Units a fixed window's state says are used, read on the master that
# serves the key (RLRedis fw_used); undef when there is none.
sub fw_used
{
	my ($self, $key) = @_;
	return $self->master_of_key($key)->fw_used($key);
}

# First half of a manual slot move: $to IMPORTING, $from MIGRATING.  From
# now on $from answers ASK for keys of the slot it does not hold.
sub migrate_begin
{
	my ($self, $slot, $from, $to) = @_;
	my $r1 = $to->cmd('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $self->id_of($from));
	my $r2 = $from->cmd('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $self->id_of($to));
	die "SETSLOT failed: ${$r1}" if ref $r1;
	die "SETSLOT failed: ${$r2}" if ref $r2;
}

# Moves the slot's keys still on $from with MIGRATE.
sub migrate_keys
{
	my ($self, $slot, $from, $to) = @_;
	for (;;)
	{
		my $keys = $from->cmd('CLUSTER', 'GETKEYSINSLOT', $slot, 100);
		last unless ref $keys eq 'ARRAY' && @$keys;
		# A node with tls-cluster yes migrates over TLS: to the TLS port.
		my $r = $from->cmd('MIGRATE', '127.0.0.1', $to->{migrate_port} // $to->port, '', 0, 5000,
			'KEYS', @$keys);
		die "MIGRATE failed: ${$r}" if ref $r;
	}
}

# Second half: the slot belongs to $to, told to every master; then $from
# answers MOVED.
sub migrate_end
{
	my ($self, $slot, $from, $to) = @_;
	my $id = $self->id_of($to);
	$self->migrate_keys($slot, $from, $to);
	for my $n ($to, $from, grep { $_ != $to && $_ != $from } $self->masters)
	{
		my $r = $n->cmd('CLUSTER', 'SETSLOT', $slot, 'NODE', $id);
		die "SETSLOT NODE failed on " . $n->port . ": ${$r}" if ref $r;
	}
	$self->wait_ok(10) or die "cluster not settled after moving slot $slot";
}

# A slot, other than those in %$avoid, served by master $m.
sub slot_on
{
	my ($self, $m, $avoid) = @_;
	for my $r ($self->slot_ranges)
	{
		next unless $r->[2] == $m->port;
		for my $s ($r->[0] .. $r->[1])
		{
			return $s unless $avoid && $avoid->{$s};
		}
	}
	return undef;
}

# CLUSTER FAILOVER on $m's replica; returns the promoted node once every
# running node agrees.
sub failover
{
	my ($self, $m) = @_;
	my $r = $self->replica_of($m) or die "no replica of " . $m->port;
	my $reply = $r->cmd('CLUSTER', 'FAILOVER');
	die "CLUSTER FAILOVER failed: ${$reply}" if ref $reply;
	my $t0 = time;
	while (time - $t0 < 15)
	{
		last if $self->topology($r)->{ $r->port }{role} eq 'master';
		usleep(10_000);
	}
	$self->wait_ok(15) or die "cluster not ok after the fail-over";
	return $r;
}

# kill -9 of a node (it stays dead; restart with ->start).
sub kill_node
{
	my ($self, $n) = @_;
	$n->kill9;
}

# Waits until the running nodes see a master for every slot again (the
# replica of a killed master took over); the seconds it took or undef.
sub wait_promoted
{
	my ($self, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < ($timeout // 15))
	{
		my %live = map { $_->port => 1 } $self->alive;
		my @r = $self->slot_ranges;
		my $covered = 0;
		$covered += $_->[1] - $_->[0] + 1 for grep { $live{ $_->[2] } } @r;
		return time - $t0 if $covered == 16384 && defined $self->wait_ok(1);
		usleep(50_000);
	}
	return undef;
}

# The sum over the given nodes (all by default) of a command's calls.
sub calls
{
	my ($self, $cmd, @nodes) = @_;
	@nodes = $self->alive unless @nodes;
	my $sum = 0;
	$sum += $_->cmdstat($cmd)->{calls} for @nodes;
	return $sum;
}

END
{
	my $rc = $?;
	for my $c (@clusters)
	{
		$_->kill9 for @{ $c->{nodes} };
	}
	$? = $rc;
}

1;
