#!/bin/bash
#
# test/layers.sh
#
# Checks that the C sources keep their layers (issue 27):
#     bash test/layers.sh [SRCDIR]        (default: the checkout's src/)
#
# Every .c and .h file under SRCDIR gets its layer from LAYERS below, the
# first pattern that matches its path (relative to SRCDIR) wins; a file no
# pattern matches is itself a violation, so a new file cannot slip past.
# Then, for each file:
#   - each #include "x.h" that names a file of the tree (looked up as the
#     compiler does with -Isrc -Isrc/redis -Isrc/local -Isrc/trigger: the
#     includer's folder first, then the tree) must be allowed by INCLUDES
#     for the includer's layer, and a header of a PRIVATE folder may be
#     included only from that folder (or from the files its line names);
#   - <hiredis/...> and <openssl/...> only under redis/ (SYSTEM);
#   - a .c file declares nothing "extern": a prototype written in a .c file
#     reaches across the layers without an #include, so it would defeat
#     the include check;
#   - every function a .c file defines without "static" (PostgreSQL style:
#     return type on its own line, the name at column 0) is declared in a
#     header of its own layer, in its own folder when that folder is
#     PRIVATE; SQL-callable functions (PG_FUNCTION_INFO_V1 in the same
#     file) and _PG_init/_PG_fini are exempt;
#   - inside a folder that ORDER ranks, a .c file names no function that
#     a file of a higher rank, or another file of its own rank, defines
#     (a call, or its address taken): the calls go one way, down, and a
#     .c file the line does not rank is a violation.
# It prints one line per violation, "file:line: what: rule broken", then
# "layers: ok (N files)" and exits 0, or "layers: N violations in M files"
# and exits 1.  Headers outside the tree (postgres.h, utils/...) are not
# checked.  Comments and string literals are ignored.
#
# The tables below are the single source of the layering rules; src/README.md
# says them in prose.

# Layer of each file: "pattern layer", first match wins.  A pattern is a
# shell glob over the path relative to SRCDIR ("*" does not cross a "/").
# A plain name also stands for a generated file that may be absent.
LAYERS='
rl_types.h                  leaf
rl_guc.h                    leaf
rl_compat.h                 leaf
rl_guc.c                    leaf
rl_args.[ch]                service
rl_stats.[ch]               service
rl_stats_limiters.c         service
rl_stats_policies.c         service
rl_policies.[ch]            service
rl_cache.[ch]               service
rl_store.h                  store-interface
redis/rl_scripts_gen.h      redis
redis/*.[ch]                redis
local/*.[ch]                local
rl_policy.[ch]              policy
rl_engine.[ch]              engine
rl_engine_int.h             engine
rl_engine_spread.c          engine
rl_refund.c                 engine
ratelimit.c                 entry
rl_batch.c                  entry
rl_layered.c                entry
rl_acquire.c                entry
rl_hold.c                   entry
rl_postgrest.[ch]           entry
trigger/*.[ch]              entry
'

# What a file of each layer may include: "layer: layers".  "own" is the
# includer's own layer (a store's own folder, since both stores are layers
# of their own).
INCLUDES='
leaf:             leaf
service:          leaf service store-interface
store-interface:  leaf service
redis:            leaf service store-interface own
local:            leaf service store-interface own
policy:           leaf service store-interface own
engine:           leaf service store-interface policy own
entry:            leaf service engine own
'

# Where a layer's non-static functions may be declared besides a header of
# its own layer (in its own folder, for a PRIVATE folder): "layer: layers".
# A store is reached through the store interface, so the function that
# hands out its table of operations is declared there.
DECLARES='
redis:            store-interface
local:            store-interface
'

# The files of a folder, bottom first: "folder/ rank rank ...", a rank one
# file or several joined by ",", which then call none of each other.  Only
# functions are checked (not variables); a rank may name a file that is
# absent.  redis/: the bytes of a link, the nodes and their failures, round
# trips, opening a link, the two topologies, readying a node for a call,
# the scripts and rl_ping's probe, the store's operations.
ORDER='
redis/      rl_link.c rl_node.c rl_roundtrip.c rl_connect.c rl_cluster.c,rl_sentinel.c rl_conn.c rl_scripts.c,rl_probe.c rl_redis.c
'

# Folders whose headers are private: "folder/ files that may include them too".
PRIVATE='
redis/
local/
trigger/     ratelimit.c
'

# System headers allowed only in some folders: "prefix folder/".
SYSTEM='
hiredis/    redis/
openssl/    redis/
'

set -u
srcdir=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src"}
if [ ! -d "$srcdir" ]; then
	echo "layers: no such directory: $srcdir" >&2
	exit 2
fi

LAYERS="$LAYERS" INCLUDES="$INCLUDES" DECLARES="$DECLARES" PRIVATE="$PRIVATE" SYSTEM="$SYSTEM" ORDER="$ORDER" \
exec perl -w - "$srcdir" <<'PERL'
use strict;
use File::Find;

# Anything that stops the check (a table that does not hold together, a file
# it cannot read) exits 2, never 1: a broken check is not a finding.
$SIG{__DIE__} = sub { print STDERR $_[0]; exit 2 };

my $src = shift;
$src =~ s{/+$}{};

sub table { map { [split] } grep { /\S/ } split /\n/, $ENV{$_[0]} }

# A shell glob ("*" within one path component, "[ch]" classes) as a regex.
sub glob_re {
	my $g = quotemeta shift;
	$g =~ s/\\\*/[^\/]*/g;
	$g =~ s/\\\[(.*?)\\\]/[$1]/g;
	return qr/^$g$/;
}

my @layers = map { [glob_re($_->[0]), $_->[1], $_->[0]] } table('LAYERS');
my %may = map { my ($l, @to) = @$_; $l =~ s/:$//; ($l => { map { $_ => 1 } @to }) } table('INCLUDES');
my %declares = map { my ($l, @to) = @$_; $l =~ s/:$//; ($l => { map { $_ => 1 } @to }) } table('DECLARES');
my @private = map { [$_->[0], { map { $_ => 1 } @{$_}[1 .. $#$_] }] } table('PRIVATE');
my @system = table('SYSTEM');
my @order = table('ORDER');

# A layer named in a rule but given to no file (a typo) would make the rule
# silently weaker: the tables must agree.
{
	my %layer = map { $_->[1] => 1 } @layers;
	for my $l (keys %may, keys %declares, map { keys %$_ } values %may, values %declares) {
		die "layers: the tables name a layer \"$l\" that LAYERS gives no file\n"
		  unless $layer{$l} || $l eq 'own';
	}
	for my $l (keys %layer) {
		die "layers: INCLUDES has no line for the layer \"$l\"\n" unless $may{$l};
	}
}

sub layer_of {
	my $f = shift;
	for (@layers) { return $_->[1] if $f =~ $_->[0] }
	return undef;
}
sub folder_of { my $f = shift; return $f =~ m{^(.*/)} ? $1 : '' }
sub private_folder {
	my $f = shift;
	for (@private) { return $_ if index($f, $_->[0]) == 0 }
	return undef;
}

# The files of the tree, plus the plain names of the table (generated files).
my @files;
find({ no_chdir => 1, wanted => sub {
	push @files, substr($File::Find::name, length($src) + 1) if -f && /\.[ch]$/;
} }, $src);
@files = sort @files;
my %known = map { $_ => 1 } @files;
for (@layers) { $known{$_->[2]} = 1 unless $_->[2] =~ /[*?\[]/ }

# The text of a file with comments and string/char literals blanked out,
# newlines kept, so that line numbers stay right.
sub code_of {
	my $f = shift;
	open my $fh, '<', "$src/$f" or die "layers: $src/$f: $!\n";
	local $/;
	my $t = <$fh>;
	$t =~ s{(^[ \t]*\#[ \t]*include[^\n]*)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(/\*.*?\*/|//[^\n]*)}{
		defined $1 ? $1 : defined $2 ? ($2 =~ /^"/ ? '""' : "''") : ' ' . "\n" x ($3 =~ tr/\n//)
	}gmse;
	return $t;
}
sub line_at { my ($t, $pos) = @_; return 1 + (substr($t, 0, $pos) =~ tr/\n//) }

my @out;
my %bad;
sub violation {
	my ($f, $line, $msg) = @_;
	push @out, "$f:$line: $msg";
	$bad{$f} = 1;
}

# An #include "name" as the compiler finds it: the includer's folder, then
# the tree (-Isrc and each folder); undef for a header outside the tree.
sub resolve {
	my ($from, $name) = @_;
	my $here = folder_of($from) . $name;
	return $here if $known{$here};
	return $name if $known{$name};
	my @hits = grep { m{(^|/)\Q$name\E$} } sort keys %known;
	return $hits[0] if @hits == 1;
	return @hits ? \@hits : undef;
}

my %code;
$code{$_} = code_of($_) for @files;

# Where each function is declared: name -> [header, line]...
my %decl;
for my $h (grep { /\.h$/ } @files) {
	my $t = $code{$h};
	$t =~ s{^[ \t]*#(?:[^\n]*\\\n)*[^\n]*}{ my $m = $&; $m =~ tr/\n//cd; $m }gme;
	# Declarations at file level only: not a struct's members, not what
	# the body of a static inline function calls.
	my $depth = 0;
	while ($t =~ /([^;{}]*)([;{}]?)/g) {
		my ($stmt, $start, $end) = ($1, $-[1], $2);
		if ($depth == 0 && $stmt !~ /\btypedef\b/ && $stmt =~ /\b([A-Za-z_]\w*)\s*\(/) {
			push @{$decl{$1}}, [$h, line_at($t, $start + $-[1])];
		}
		$depth++ if $end eq '{';
		$depth-- if $end eq '}' && $depth > 0;
		last if $end eq '';
	}
}

for my $f (@files) {
	my $layer = layer_of($f);
	unless (defined $layer) {
		violation($f, 1, "$f (unclassified): unclassified file: add it to the layer table");
		next;
	}
	my $t = $code{$f};
	my $dir = folder_of($f);
	my $own_priv = private_folder($f);

	while ($t =~ /^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]/mg) {
		my ($kind, $name, $line) = ($1, $2, line_at($t, $-[0]));
		if ($kind eq '<') {
			for (@system) {
				my ($prefix, $folder) = @$_;
				next unless index($name, $prefix) == 0 && index($f, $folder) != 0;
				violation($f, $line, "$f ($layer) includes <$name>: <$prefix...> may be included only under $folder");
			}
			next;
		}
		my $h = resolve($f, $name);
		next unless defined $h;
		if (ref $h) {
			violation($f, $line, "$f ($layer) includes \"$name\": ambiguous, it names @$h");
			next;
		}
		my $hl = layer_of($h) // 'unclassified';
		my $hp = private_folder($h);
		my $what = "$f ($layer) includes $h ($hl)";
		if ($layer ne $hl && "$layer $hl" =~ /^(redis local|local redis)$/) {
			violation($f, $line, "$what: the two stores never include each other");
		} elsif ($hp && index($f, $hp->[0]) != 0 && !$hp->[1]{$f}) {
			my $also = join ', ', sort keys %{$hp->[1]};
			violation($f, $line, "$what: headers under $hp->[0] are private to $hp->[0]" .
				($also ? " (and $also)" : ''));
		} elsif (!($may{$layer}{$hl} || ($may{$layer}{own} && $hl eq $layer))) {
			my @ok = sort map { $_ eq 'own' ? $layer : $_ } keys %{$may{$layer} // {}};
			violation($f, $line, "$what: $layer may include only @ok");
		}
	}

	next unless $f =~ /\.c$/;

	while ($t =~ /^[ \t]*(?:[A-Za-z_]\w*[ \t]+)*extern\b[^;{]*/mg) {
		my ($line, $decl) = (line_at($t, $-[0]), $&);
		$decl =~ s/\s+/ /g;
		$decl =~ s/^ | $//g;
		violation($f, $line, "$f ($layer) declares \"$decl\": no extern in a .c file, include the header that declares it");
	}

	my %sql = map { $_ => 1 } $t =~ /\bPG_FUNCTION_INFO_V1\s*\(\s*(\w+)\s*\)/g;
	# Definitions, PostgreSQL style: a return type line, then "name(" at
	# column 0, the argument list, then "{".
	while ($t =~ /^([^\n#;{}()]*[\w*][ \t]*)\n([A-Za-z_]\w*)\(([^;{}]*?)\)[^;{}()]*\{/mg) {
		my ($type, $name, $line) = ($1, $2, line_at($t, $-[2]));
		next if $type =~ /\bstatic\b/ || $type =~ /^\s/ || $type =~ /^\s*(?:else|return|do)\b/;
		next if $sql{$name} || $name =~ /^_PG_(?:init|fini)$/;
		my @d = @{$decl{$name} // []};
		unless (@d) {
			violation($f, $line, "$f ($layer) defines $name(), declared in no header: make it static or declare it in a header of its layer");
			next;
		}
		for (@d) {
			my ($h, $hline) = @$_;
			my $hl = layer_of($h) // 'unclassified';
			my $hp = private_folder($h);
			next if $declares{$layer}{$hl};
			my $wrong = $hl ne $layer ? "a function of layer $layer declared in a header of layer $hl"
				: ($own_priv && (!$hp || $hp != $own_priv)) ? "a function of $own_priv->[0] declared outside it"
				: ($hp && (!$own_priv || $hp != $own_priv)) ? "declared in a header private to $hp->[0]"
				: undef;
			violation($f, $line, "$f ($layer) defines $name(), declared in $h:$hline ($hl): $wrong") if $wrong;
		}
	}
}

# The order inside a folder: a file names no function of a file above it.
for (@order) {
	my ($folder, @ranks) = @$_;
	my %rank;
	for my $r (0 .. $#ranks) {
		for my $f (split /,/, $ranks[$r]) {
			die "layers: ORDER names $folder$f twice\n" if exists $rank{"$folder$f"};
			$rank{"$folder$f"} = $r;
		}
	}
	my @in = grep { /\.c$/ && index($_, $folder) == 0 && substr($_, length $folder) !~ m{/} } @files;
	my (%def, %own);
	for my $f (@in) {
		unless (exists $rank{$f}) {
			violation($f, 1, "$f is not ranked in ORDER's line for $folder: add it there, above every file it calls");
			next;
		}
		while ($code{$f} =~ /^([^\n#;{}()]*[\w*][ \t]*)\n([A-Za-z_]\w*)\(([^;{}]*?)\)[^;{}()]*\{/mg) {
			my ($type, $name) = ($1, $2);
			next if $type =~ /^\s/ || $type =~ /^\s*(?:else|return|do)\b/;
			$own{$f}{$name} = 1;
			$def{$name} = $f unless $type =~ /\bstatic\b/;
		}
	}
	for my $f (grep { exists $rank{$_} } @in) {
		my $t = $code{$f};
		my %seen;
		while ($t =~ /\b([A-Za-z_]\w*)\b/g) {
			my ($name, $pos) = ($1, $-[1]);
			my $g = $def{$name};
			next if !defined $g || $g eq $f || $own{$f}{$name} || $seen{$name}++;
			next if $rank{$g} < $rank{$f};
			my $how = $rank{$g} == $rank{$f} ? "a file of its own rank" : "a file above it";
			violation($f, line_at($t, $pos), "$f (rank $rank{$f}) names $name() of $g (rank $rank{$g}): " .
				"no file of $folder calls $how (ORDER)");
		}
	}
}

print "$_\n" for @out;
if (@out) {
	printf "layers: %d violation%s in %d file%s\n", scalar @out, @out == 1 ? '' : 's',
		scalar keys %bad, keys %bad == 1 ? '' : 's';
	exit 1;
}
printf "layers: ok (%d files)\n", scalar @files;
exit 0;
PERL
