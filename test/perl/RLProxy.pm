# test/perl/RLProxy.pm
#
# A hostile peer for the TAP suites: a TCP proxy between the extension and
# a real redis-server that forwards every command and, per a fault plan
# the test sets, damages the reply to one of them.  It parses both
# directions as RESP, so a plan targets a command by name and rank on its
# connection ("the 2nd EVALSHA"), and a fault acts on exactly that
# command's reply: replaced (wrong type, bad length, garbage ...), cut
# short, split into delayed pieces, delayed, preceded or followed by a
# reply nobody asked for, swapped with the next reply, or the connection
# closed instead.
#
# The proxy runs in a child process; the test talks to it over a control
# socket, one line per request:
#   PLAN k=v ...   arm one fault (fires once, on the first match)
#   CLEAR          disarm
#   KICK           close every client connection (the next call reconnects)
#   STATUS         "OK fired=0|1 conns=N cmds=NAME,NAME,..." (the commands
#                  seen on the newest connection)
# Plan keys: cmd (command name, upper case, or * for any), nth (the nth
# match on a connection since the plan was set, from 1), fault, data (hex), n, ms, then.

package RLProxy;

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time);

# RLProxy->new(upstream_port): a started proxy on a free loopback port.
sub new
{
	my ($class, $upstream) = @_;
	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Proto => 'tcp',
		Listen => 64,
		ReuseAddr => 1) or die "proxy listen: $!";
	my $control = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Proto => 'tcp',
		Listen => 4,
		ReuseAddr => 1) or die "proxy control: $!";
	my $self = bless {
		port => $listen->sockport,
		control_port => $control->sockport,
		upstream => $upstream,
	}, $class;
	my $pid = fork;
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# The child: never run the test's END blocks.
		eval { serve($listen, $control, $upstream) };
		print STDERR "RLProxy: $@" if $@;
		POSIX::_exit(0);
	}
	close $listen;
	close $control;
	$self->{pid} = $pid;
	$self->{ctl} = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $self->{control_port},
		Proto => 'tcp') or die "proxy control connect: $!";
	$self->{ctl}->autoflush(1);
	return $self;
}

sub port { $_[0]->{port} }
# The proxy listens on loopback; rl_node points a cluster at host:port.
sub host { '127.0.0.1' }

sub request
{
	my ($self, $line) = @_;
	my $ctl = $self->{ctl};
	print $ctl "$line\n";
	my $reply = <$ctl>;
	die "proxy control: no reply to '$line'" unless defined $reply;
	chomp $reply;
	die "proxy control: $reply" unless $reply =~ /^OK/;
	return $reply;
}

# plan(cmd => 'EVALSHA', nth => 1, fault => 'replace', data => ":1\r\n")
sub plan
{
	my ($self, %p) = @_;
	$p{data} = unpack('H*', $p{data}) if defined $p{data};
	$self->request(join ' ', 'PLAN',
		map { "$_=$p{$_}" } grep { defined $p{$_} } sort keys %p);
}

sub clear { $_[0]->request('CLEAR') }
sub kick { $_[0]->request('KICK') }

# {fired => 0|1, conns => accepted so far, cmds => [names on the newest]}
sub status
{
	my ($self) = @_;
	my $r = $self->request('STATUS');
	my %h = $r =~ /(\w+)=(\S*)/g;
	$h{cmds} = [ split /,/, $h{cmds} // '' ];
	return \%h;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'KILL', $self->{pid};
	waitpid $self->{pid}, 0;
	delete $self->{pid};
}

sub DESTROY { $_[0]->stop }

# One plan as text, for a test's diagnostics and to replay it.
sub describe
{
	my (%p) = @_;
	return join ' ', map {
		my $v = $p{$_};
		$v =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge if $_ eq 'data';
		"$_=$v"
	} grep { defined $p{$_} } sort keys %p;
}

# The end of the RESP frame that starts at $pos in $$buf, or undef if it
# is not complete yet; dies on bytes that are not RESP.
sub frame_end
{
	my ($buf, $pos, $depth) = @_;
	die "nesting too deep\n" if ($depth // 0) > 64;
	my $eol = index($$buf, "\r\n", $pos);
	return undef if $eol < 0;
	my $type = substr($$buf, $pos, 1);
	my $line = substr($$buf, $pos + 1, $eol - $pos - 1);
	my $next = $eol + 2;
	return $next if $type eq '+' || $type eq '-' || $type eq ':';
	die "bad length '$line'\n" unless $line =~ /^-?\d+$/;
	if ($type eq '$')
	{
		return $next if $line < 0;
		return undef if length($$buf) < $next + $line + 2;
		return $next + $line + 2;
	}
	if ($type eq '*')
	{
		for (1 .. $line)
		{
			$next = frame_end($buf, $next, ($depth // 0) + 1);
			return undef unless defined $next;
		}
		return $next;
	}
	die "bad type byte '$type'\n";
}

# The command name of a request frame (*N $len NAME ...).
sub command_name
{
	my ($frame) = @_;
	return $frame =~ /^\*\d+\r\n\$\d+\r\n([^\r]*)\r\n/ ? uc $1 : '?';
}

# The proxy's event loop (in the child).
sub serve
{
	my ($listen, $control, $upstream) = @_;
	my $sel = IO::Select->new($listen, $control);
	my (%conn, %by_fd, $ctl, $ctlbuf);
	my $plan;
	my $fired = 0;
	my $hits = 0;
	my $nconns = 0;
	my $newest;
	$SIG{PIPE} = 'IGNORE';

	my $close = sub {
		my ($c) = @_;
		return if $c->{closed};
		$c->{closed} = 1;
		for my $s ($c->{down}, $c->{up})
		{
			next unless $s;
			$sel->remove($s);
			delete $by_fd{ fileno $s };
			close $s;
		}
		delete $conn{ $c->{id} };
	};

	# Queue bytes for the client, due at $due; an action ('close' or
	# 'stall') takes effect once everything before it is written.
	my $queue = sub {
		my ($c, $bytes, $due, $action) = @_;
		push @{ $c->{out} }, [ $due // 0, $bytes, $action ];
	};

	# A reply frame from Redis for the command at the head of the queue.
	my $on_reply = sub {
		my ($c, $frame) = @_;
		my $cmd = shift @{ $c->{pending} } // [ '?', undef ];
		my ($name, $p) = @$cmd;
		my $now = time;
		if ($c->{held})
		{
			# A swap: this reply goes first, the held one after it.
			my $held = delete $c->{held};
			$queue->($c, $frame . $held, 0);
			return;
		}
		return $queue->($c, $frame, 0) unless $p;
		my $f = $p->{fault};
		my $data = defined $p->{data} ? pack('H*', $p->{data}) : '';
		my $n = $p->{n} // int(length($frame) / 2);
		my $ms = ($p->{ms} // 0) / 1000;
		if ($f eq 'replace') { $queue->($c, $data, 0) }
		elsif ($f eq 'before') { $queue->($c, $data . $frame, 0) }
		elsif ($f eq 'after') { $queue->($c, $frame . $data, 0) }
		elsif ($f eq 'delay') { $queue->($c, $frame, $now + $ms) }
		elsif ($f eq 'truncate')
		{
			$n = length($frame) - 1 if $n >= length($frame);
			$queue->($c, substr($frame, 0, $n), 0, $p->{then} // 'close');
		}
		elsif ($f eq 'split')
		{
			my $size = $p->{n} // 1;
			my $t = $now;
			for (my $i = 0; $i < length($frame); $i += $size)
			{
				$queue->($c, substr($frame, $i, $size), $t);
				$t += $ms;
			}
		}
		elsif ($f eq 'flip')
		{
			my $i = $n % length($frame);
			substr($frame, $i, 1) = chr(ord(substr($frame, $i, 1)) ^ ($p->{mask} // 0x41));
			$queue->($c, $frame, 0);
		}
		elsif ($f eq 'close') { $queue->($c, '', 0, 'close') }
		elsif ($f eq 'drop') { $queue->($c, '', 0, 'stall') }
		elsif ($f eq 'swap') { $c->{held} = $frame }
		else { $queue->($c, $frame, 0) }
		$queue->($c, '', 0, $p->{then}) if $p->{then} && $f ne 'truncate';
	};

	for (;;)
	{
		# Write what is due; find the next due time.
		my $now = time;
		my $wait = 1;
		for my $c (values %conn)
		{
			while (my $chunk = $c->{out}[0])
			{
				my ($due, $bytes, $action) = @$chunk;
				if ($due > $now)
				{
					$wait = $due - $now if $due - $now < $wait;
					last;
				}
				# Whatever is due goes out in one write, as Redis would send it.
				while (!defined $action && @{ $c->{out} } > 1 && $c->{out}[1][0] <= $now)
				{
					my $nextc = splice @{ $c->{out} }, 1, 1;
					$chunk->[1] .= $nextc->[1];
					$chunk->[2] = $action = $nextc->[2];
				}
				$bytes = $chunk->[1];
				if (length $bytes)
				{
					my $w = syswrite($c->{down}, $bytes);
					if (!defined $w)
					{
						last if $!{EAGAIN};
						$close->($c);
						last;
					}
					substr($chunk->[1], 0, $w) = '';
					if (length $chunk->[1])
					{
						$wait = 0.005;
						last;
					}
				}
				shift @{ $c->{out} };
				if (($action // '') eq 'close')
				{
					$close->($c);
					last;
				}
				if (($action // '') eq 'stall')
				{
					$c->{stalled} = 1;
					$c->{out} = [];
				}
			}
		}
		my @ready = $sel->can_read($wait);
		for my $s (@ready)
		{
			if ($s == $listen)
			{
				my $down = $listen->accept or next;
				my $up = IO::Socket::INET->new(
					PeerAddr => '127.0.0.1',
					PeerPort => $upstream,
					Proto => 'tcp');
				if (!$up)
				{
					close $down;
					next;
				}
				$down->blocking(0);
				my $c = {
					id => ++$nconns,
					down => $down,
					up => $up,
					inbuf => '',
					upbuf => '',
					pending => [],
					out => [],
					seen => {},
					names => [],
				};
				$conn{ $c->{id} } = $c;
				$newest = $c;
				$by_fd{ fileno $down } = [ $c, 'down' ];
				$by_fd{ fileno $up } = [ $c, 'up' ];
				$sel->add($down, $up);
				next;
			}
			if ($s == $control)
			{
				$sel->remove($ctl) if $ctl;
				$ctl = $control->accept or next;
				$ctl->autoflush(1);
				$ctlbuf = '';
				$sel->add($ctl);
				next;
			}
			if ($ctl && $s == $ctl)
			{
				my $r = sysread($ctl, $ctlbuf, 65536, length $ctlbuf);
				if (!$r)
				{
					# The test went away: so does the proxy.
					$close->($_) for values %conn;
					return;
				}
				while ($ctlbuf =~ s/^([^\n]*)\n//)
				{
					my $line = $1;
					my $answer = 'OK';
					if ($line =~ /^PLAN\s*(.*)$/)
					{
						$plan = { map { split /=/, $_, 2 } split ' ', $1 };
						$plan->{cmd} //= '*';
						$plan->{nth} //= 1;
						$fired = 0;
						$hits = 0;
						# Ranks count from now on, on every connection.
						for my $c (values %conn)
						{
							$c->{seen} = {};
							$c->{anyrank} = 0;
						}
					}
					elsif ($line eq 'CLEAR') { undef $plan }
					elsif ($line eq 'KICK') { $close->($_) for values %conn }
					elsif ($line eq 'STATUS')
					{
						$answer = "OK fired=" . ($hits ? 1 : 0) . " hits=$hits conns=$nconns cmds="
						  . join(',', $newest ? @{ $newest->{names} } : ());
					}
					else { $answer = "ERR unknown request" }
					print $ctl "$answer\n";
				}
				next;
			}
			my $e = $by_fd{ fileno $s } or next;
			my ($c, $side) = @$e;
			if ($side eq 'down')
			{
				my $r = sysread($s, $c->{inbuf}, 65536, length $c->{inbuf});
				if (!$r)
				{
					$close->($c) unless defined $r && $!{EAGAIN};
					next;
				}
				# Forward whole requests, noting each one's name and plan.
				my $pos = 0;
				my $end;
				my $forward = '';
				while (1)
				{
					$end = eval { frame_end(\$c->{inbuf}, $pos) };
					last unless defined $end;
					my $frame = substr($c->{inbuf}, $pos, $end - $pos);
					$pos = $end;
					my $name = command_name($frame);
					my $rank = ++$c->{seen}{$name};
					$c->{anyrank}++;
					push @{ $c->{names} }, $name;
					my $p;
					if ($plan && !$fired &&
						(($plan->{cmd} eq '*' && $c->{anyrank} == $plan->{nth}) ||
						 ($plan->{cmd} eq $name && $rank == $plan->{nth})))
					{
						$p = $plan;
						$fired = 1 unless $plan->{repeat};
						$hits++;
						if ($p->{fault} eq 'closereq')
						{
							# Closed before Redis sees the command.
							$close->($c);
							last;
						}
					}
					push @{ $c->{pending} }, [ $name, $p ];
					$forward .= $frame;
				}
				if (length $forward && !$c->{closed})
				{
					my $up = $c->{up};
					print $up $forward;
					$up->flush;
				}
				substr($c->{inbuf}, 0, $pos) = '' unless $c->{closed};
			}
			else
			{
				my $r = sysread($s, $c->{upbuf}, 65536, length $c->{upbuf});
				if (!$r)
				{
					# Redis went away: deliver what is queued, then close.
					$queue->($c, '', 0, 'close');
					$sel->remove($s);
					next;
				}
				my $pos = 0;
				while (1)
				{
					my $end = eval { frame_end(\$c->{upbuf}, $pos) };
					last unless defined $end;
					my $frame = substr($c->{upbuf}, $pos, $end - $pos);
					$pos = $end;
					next if $c->{stalled};
					$on_reply->($c, $frame);
				}
				substr($c->{upbuf}, 0, $pos) = '';
			}
		}
	}
}

1;
