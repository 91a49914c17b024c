# test/perl/RLNetns.pm
#
# A black-holed network for a TAP suite, staged without root.  The suite
# runs itself again inside a user namespace of its own
#     unshare --user --map-current-user --net --keep-caps
# where, still as its own user (PostgreSQL refuses uid 0, even inside a
# namespace), it holds CAP_NET_ADMIN over the network namespaces it makes
# and over nothing else on the machine.  Three namespaces:
#
#   A  the suite's own: the suite and PostgreSQL       10.231.0.1/30
#   R  a router (ip_forward on)        10.231.0.2/30 + 10.231.0.5/30
#   B  Redis                                           10.231.0.6/30
#
# joined by two veth pairs.  A blackhole route in R for B's and A's
# addresses drops every packet between them, SYNs included, and tells
# nobody (a forwarded packet gets no ICMP error, unlike one sent locally
# to a blackhole route, which fails at once); deleting the routes lifts it.
# netem and nftables are not needed (this machine's kernel has neither).
#
# Nothing outside the suite is touched, and nothing outlives it: the
# namespaces are gone once their last process is.  R and B are held by
# sleep processes that the kernel kills when the suite ends, however it
# ends (PR_SET_PDEATHSIG); the Redis in B is killed by RLRedis's END.
#
# Use:
#   BEGIN { require RLNetns; RLNetns::enter_or_skip(); }   # first of all
#   my $net = RLNetns->new;
#   RLRedis->new(bind => $net->b_addr, wrap => [ $net->in_b ], unixsocket => 1);
#   $net->blackhole(1); ... $net->blackhole(0);

package RLNetns;

use strict;
use warnings;

use POSIX ();
use Time::HiRes qw(usleep);

my $A_ADDR = '10.231.0.1';
my $RA_ADDR = '10.231.0.2';
my $RB_ADDR = '10.231.0.5';
my $B_ADDR = '10.231.0.6';

my @holders;

# The programs needed, found also where postgres's PATH may not look.
sub tool
{
	my ($name) = @_;
	for my $dir (split(/:/, $ENV{PATH} // ''), qw(/usr/sbin /sbin /usr/bin /bin))
	{
		return "$dir/$name" if $dir ne '' && -x "$dir/$name";
	}
	return undef;
}

# Called from a BEGIN block before anything else: runs the suite again in
# its own user and network namespace, or skips it with the reason.  The
# process keeps its pid (unshare and perl replace it in turn), so the
# harness reads the suite's output as usual.
sub enter_or_skip
{
	return if ($ENV{RL_NETNS_INSIDE} // '') eq 'yes';

	my $why;
	my %path;
	for my $t (qw(ip unshare nsenter setpriv))
	{
		$path{$t} = tool($t);
		$why //= "no $t(8) on this machine (iproute2, util-linux)" unless $path{$t};
	}
	$why //= 'running as root: PostgreSQL refuses uid 0, also inside a user '
	  . 'namespace (test/check.sh runs the suites as postgres)'
	  if $> == 0;
	if (!$why)
	{
		my @probe = ($path{unshare}, qw(--user --map-current-user --net --keep-caps),
			$path{ip}, qw(link set lo up));
		my $out = `@probe 2>&1`;
		chomp $out;
		$why = 'unprivileged user and network namespaces are not available here'
		  . ($out ne '' ? " ($out)" : '')
		  . '; kernel.unprivileged_userns_clone or user.max_user_namespaces may forbid them'
		  if $? != 0;
	}
	if ($why)
	{
		require Test::More;
		Test::More::plan(skip_all => $why);
	}

	$ENV{RL_NETNS_INSIDE} = 'yes';
	$ENV{PERL5LIB} = join(':', grep { !ref } @INC);
	$ENV{PATH} = "$ENV{PATH}:/usr/sbin:/sbin";
	exec($path{unshare}, qw(--user --map-current-user --net --keep-caps),
		$^X, $0, @ARGV) or die "exec unshare: $!";
}

# Runs a command, dies with its output if it fails.
sub run
{
	my @cmd = @_;
	my $out = `@cmd 2>&1`;
	die "@cmd: $out" if $? != 0;
	return $out;
}

# A process in a new network namespace that lives until the suite ends.
sub holder
{
	my $ns = readlink('/proc/self/ns/net');
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		exec('setpriv', '--pdeathsig', 'KILL', 'unshare', '--net', 'sleep', '3600')
		  or POSIX::_exit(1);
	}
	for (1 .. 200)
	{
		# Up once sleep runs: setpriv and unshare have done their work.
		my $comm = '';
		if (open my $fh, '<', "/proc/$pid/comm")
		{
			$comm = <$fh> // '';
			close $fh;
		}
		my $its = readlink("/proc/$pid/ns/net") // $ns;
		last if $comm =~ /^sleep/ && $its ne $ns;
		usleep(10_000);
	}
	push @holders, $pid;
	return $pid;
}

sub new
{
	my ($class) = @_;
	die "RLNetns->new outside RLNetns::enter_or_skip" unless $ENV{RL_NETNS_INSIDE};
	my $self = bless {}, $class;
	$self->{r} = holder();
	$self->{b} = holder();
	my @r = $self->in_r;
	my @b = $self->in_b;

	run(qw(ip link set lo up));
	run(qw(ip link add rl-a type veth peer name rl-ra netns), $self->{r});
	run(@r, qw(ip link add rl-rb type veth peer name rl-b netns), $self->{b});
	run(qw(ip addr add), "$A_ADDR/30", qw(dev rl-a));
	run(qw(ip link set rl-a up));
	run(qw(ip route add 10.231.0.4/30 via), $RA_ADDR);
	run(@r, qw(ip link set lo up));
	run(@r, qw(ip addr add), "$RA_ADDR/30", qw(dev rl-ra));
	run(@r, qw(ip addr add), "$RB_ADDR/30", qw(dev rl-rb));
	run(@r, qw(ip link set rl-ra up));
	run(@r, qw(ip link set rl-rb up));
	run(@r, qw(sh -c), "'echo 1 > /proc/sys/net/ipv4/ip_forward'");
	run(@b, qw(ip link set lo up));
	run(@b, qw(ip addr add), "$B_ADDR/30", qw(dev rl-b));
	run(@b, qw(ip link set rl-b up));
	run(@b, qw(ip route add default via), $RB_ADDR);
	$self->{holed} = 0;
	return $self;
}

# RLNetns->leaves($n): another layout, for slowing one link alone.  $n
# namespaces L1..Ln, each joined to the suite's own by a veth pair of its
# own (10.231.1.4i+1 on the suite's side, 10.231.1.4i+2 in Li); the
# suite's namespace routes between the leaves.
# A server in the suite's namespace binds home_addr, which every leaf
# reaches; leaf_addr($i) and in_leaf($i) place a server in Li; shape($i,
# $rate) slows what the suite's namespace sends into Li to $rate with a
# token bucket (tbf: this kernel has no netem, so a slow link is a narrow
# one, not a delayed one).
sub leaves
{
	my ($class, $n) = @_;
	die "RLNetns->leaves outside RLNetns::enter_or_skip" unless $ENV{RL_NETNS_INSIDE};
	my $self = bless { leaves => [] }, $class;
	run(qw(ip link set lo up));
	# The leaves reach one another through the suite's namespace.
	run(qw(sh -c), "'echo 1 > /proc/sys/net/ipv4/ip_forward'");
	for my $i (1 .. $n)
	{
		my $pid = holder();
		my @in = ('nsenter', '-t', $pid, '-n');
		my ($here, $there) = map { '10.231.1.' . (4 * $i + $_) } 1, 2;
		run(qw(ip link add), "rl-l$i", qw(type veth peer name), "rl-x$i", 'netns', $pid);
		run(qw(ip addr add), "$here/30", 'dev', "rl-l$i");
		# Small segments (a socket takes its segment size at once): with
		# the veth's 64 kB ones a socket takes some 46 kB at one write
		# whatever its send buffer, so a writer that turns away for a
		# second on a slow link would find much of its data sent anyway.
		run(qw(ip link set dev), "rl-l$i", qw(gso_max_size 4096));
		run(qw(ip link set), "rl-l$i", 'up');
		run(@in, qw(ip link set lo up));
		run(@in, qw(ip addr add), "$there/30", 'dev', "rl-x$i");
		run(@in, qw(ip link set), "rl-x$i", 'up');
		run(@in, qw(ip route add default via), $here);
		push @{ $self->{leaves} }, { addr => $there, dev => "rl-l$i", in => \@in };
	}
	return $self;
}

sub home_addr { '10.231.1.5' }
sub leaf_addr { $_[0]->{leaves}[ $_[1] - 1 ]{addr} }
sub in_leaf { @{ $_[0]->{leaves}[ $_[1] - 1 ]{in} } }

sub shape
{
	my ($self, $i, $rate) = @_;
	run(qw(tc qdisc replace dev), $self->{leaves}[ $i - 1 ]{dev},
		qw(root tbf rate), $rate, qw(burst 16kb latency 500ms));
}

sub a_addr { $A_ADDR }
sub b_addr { $B_ADDR }

# Command prefixes that run a program in R or B.
sub in_r { ('nsenter', '-t', $_[0]->{r}, '-n') }
sub in_b { ('nsenter', '-t', $_[0]->{b}, '-n') }

# blackhole(1): R drops every packet between A and B, silently;
# blackhole(0) lifts it.
sub blackhole
{
	my ($self, $on) = @_;
	return if $on == $self->{holed};
	for my $addr ($B_ADDR, $A_ADDR)
	{
		run($self->in_r, qw(ip route), ($on ? 'add' : 'del'), 'blackhole', "$addr/32");
	}
	$self->{holed} = $on;
}

END
{
	my $rc = $?;
	kill 'KILL', @holders if @holders;
	$? = $rc;
}

1;
