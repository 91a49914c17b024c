# test/t/031_docs.pl
#
# Every snippet is run from the docs' own text (issue 27).  For README.md
# and each doc/*.md, in that order, a fresh database is created and every
# ```sql block of the page is run as written, in order, one block per psql
# (-X, ON_ERROR_STOP), so a failure names the page and the block's line.
# A block passes when psql succeeds and says neither ERROR nor WARNING (a
# WARNING is how a call says Redis was not reached).
#
# Settings.  A page states what its blocks need in ```ini blocks, as a
# reader would write them in postgresql.conf; its "ratelimit.x = y" lines
# go into an include file of the node, reloaded when that set changes
# from one page to the next (restarted for a setting fixed at server
# start; none so far), so each page runs with its own settings and the
# defaults.  Two kinds of line are not applied:
# shared_preload_libraries (the node preloads the library already) and
# the settings that say where Redis is and how to reach it
# (ratelimit.redis_* and ratelimit.sentinel_*): they describe the
# reader's Redis, and the test's own Redis, on loopback, serves every page.
#
# Outputs.  A ```text block that comes right after a ```sql block and
# starts with a line of it is a transcript of that block: each result
# table it shows (header, rule and rows) must be in what psql printed for
# the block.  Other text blocks (failures shown on purpose, outputs that
# depend on the clock) are not run.
#
# Roles are cluster-wide, and the docs keep their names apart across
# pages: they are kept until the end, so a name two pages create fails the
# second page.  Then the databases and every role the test created are
# dropped.
#
# RL_DOCS_ROOT=<dir> reads README.md and doc/ from another directory (a
# copy with a planted error shows that the test can fail).

use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node);

# The TAP suites run from the checkout, or from a copy of its test/ with
# README.md and doc/ beside it.
my $root = $ENV{RL_DOCS_ROOT} // "$FindBin::RealBin/../..";
die "no README.md in $root" unless -f "$root/README.md";
die "no doc/ in $root" unless -d "$root/doc";
my @pages = ('README.md',
	map { "doc/" . ($_ =~ s{.*/}{}r) } sort glob("$root/doc/*.md"));

# The fenced blocks of a page, in order: { lang (the info string's first
# word), line (of the opening fence), lines }.  A fence may be indented (a
# block inside a list item); its indent is taken off the block's lines.
sub blocks
{
	my ($page) = @_;
	my @lines = split /\n/, slurp_file("$root/$page"), -1;
	my (@blocks, $open);
	for my $i (0 .. $#lines)
	{
		my $l = $lines[$i];
		if (!$open)
		{
			next unless $l =~ /^(\s*)```\s*(\S*)/;
			$open = { lang => lc($2), line => $i + 1, indent => length($1),
				lines => [] };
		}
		elsif ($l =~ /^\s*```\s*$/)
		{
			push @blocks, $open;
			undef $open;
		}
		else
		{
			$l =~ s/^ {0,$open->{indent}}//;
			push @{ $open->{lines} }, $l;
		}
	}
	die "$page: the block at line $open->{line} is never closed" if $open;
	return @blocks;
}

# The "ratelimit.x = y" lines of a page's ini blocks that the test
# applies, and those it leaves to the reader's deployment.
sub page_settings
{
	my (@blocks) = @_;
	my (@apply, @skip);
	for my $b (grep { $_->{lang} eq 'ini' } @blocks)
	{
		for (@{ $b->{lines} })
		{
			next unless /^\s*(ratelimit\.\w+)\s*=/;
			my $name = $1;
			my $line = s/^\s+|\s+$//gr;
			if ($name =~ /^ratelimit\.(redis|sentinel)_/)
			{
				push @skip, $line;
			}
			else
			{
				push @apply, $line;
			}
		}
	}
	return (\@apply, \@skip);
}

# The result tables of a text block, each as its lines (trailing blanks
# off): a header, a rule of dashes (and '+'), the rows that follow.
sub tables
{
	my (@lines) = map { s/\s+$//r } @_;
	my @tables;
	for my $i (1 .. $#lines)
	{
		next unless $lines[$i] =~ /^-+(\+-+)*$/;
		my @t = @lines[ $i - 1, $i ];
		for my $j ($i + 1 .. $#lines)
		{
			last unless $lines[$j] =~ /^ /;
			push @t, $lines[$j];
		}
		push @tables, \@t;
	}
	return @tables;
}

my $redis = RLRedis->new(name => 'r031');
my $node = rl_node('c031', $redis, qq{
include_if_exists = 'rl_docs_page.conf'
});
my $page_conf = $node->data_dir . '/rl_docs_page.conf';
my $dir = PostgreSQL::Test::Utils::tempdir;

# Writes the node's page settings and makes every new session see them:
# a reload, or a restart where a setting (old or new) is fixed at server
# start.
sub apply_settings
{
	my ($old, $new) = @_;
	my @names = map { /^(ratelimit\.\w+)/ ? "'$1'" : () } split /\n/, $old . $new;
	my $restart = @names && $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_settings WHERE context = 'postmaster' "
		  . "AND name IN (" . join(', ', @names) . ")");
	my $loaded = $node->safe_psql('postgres', 'SELECT pg_conf_load_time()');
	open my $fh, '>', $page_conf or die "$page_conf: $!";
	print $fh $new;
	close $fh;
	if ($restart)
	{
		$node->restart;
		return;
	}
	$node->reload;
	$node->poll_query_until('postgres',
		"SELECT pg_conf_load_time() <> '$loaded'")
	  or die "the node did not reload its configuration";
}

my %roles_before = map { $_ => 1 } split /\n/,
  $node->safe_psql('postgres', 'SELECT rolname FROM pg_roles');

my ($applied, $nblocks, $ntables) = ('', 0, 0);
my @dbs;
for my $page (@pages)
{
	my @blocks = blocks($page);
	my @sql = grep { $_->{lang} eq 'sql' } @blocks;
	my ($apply, $skip) = page_settings(@blocks);
	note "$page: " . scalar(@sql) . " sql blocks";
	note "$page: where Redis is, left to the test: "
	  . join(', ', map { /^(\S+)/ } @$skip) if @$skip;
	next unless @sql;

	# The page's settings (only when they differ from the previous page's).
	my $conf = join('', map { "$_\n" } @$apply);
	if ($conf ne $applied)
	{
		apply_settings($applied, $conf);
		$applied = $conf;
		is( $node->safe_psql('postgres',
				"SELECT count(*) FROM pg_file_settings "
				  . "WHERE sourcefile LIKE '%/rl_docs_page.conf' AND applied AND error IS NULL"),
			scalar(@$apply),
			"$page: its settings applied: "
			  . (@$apply ? join('; ', @$apply) : 'none'));
	}

	(my $db = "doc_" . lc($page)) =~ s/\.md$//;
	$db =~ s/[^a-z0-9]+/_/g;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	push @dbs, $db;

	for my $k (0 .. $#blocks)
	{
		my $b = $blocks[$k];
		next unless $b->{lang} eq 'sql';
		$nblocks++;
		(my $file = "$page:$b->{line}.sql") =~ s{/}{_}g;
		$file = "$dir/$file";
		open my $fh, '>', $file or die "$file: $!";
		print $fh join("\n", @{ $b->{lines} }), "\n";
		close $fh;

		my ($out, $err) = ('', '');
		my $ok = eval {
			IPC::Run::run [ 'psql', '-X', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr($db), '-f', $file ],
			  '<', \undef, '>', \$out, '2>', \$err,
			  IPC::Run::timeout(120);
		};
		$err .= $@ if $@;
		ok($ok && $err !~ /\b(ERROR|WARNING|FATAL|PANIC):/,
			"$page, the sql block at line $b->{line} runs as written")
		  or diag "$page line $b->{line}:\n$err";

		# A transcript of this block right after it: its tables, as psql
		# printed them.
		my $t = $blocks[ $k + 1 ];
		next unless $t && $t->{lang} eq 'text' && @{ $t->{lines} };
		my %stmt = map { (s/^\s+|\s+$//gr, 1) } @{ $b->{lines} };
		next unless $stmt{ $t->{lines}[0] =~ s/^\s+|\s+$//gr };
		my $printed = join("\n", map { s/\s+$//r } split /\n/, $out) . "\n";
		for my $table (tables(@{ $t->{lines} }))
		{
			$ntables++;
			my $want = join("\n", @$table) . "\n";
			ok(index($printed, $want) >= 0,
				"$page, the text block at line $t->{line}: the table"
				  . " '$table->[0]' is what the block at line $b->{line} printed")
			  or diag "wanted:\n$want\npsql printed:\n$printed";
		}
	}
}
note "$nblocks sql blocks run, $ntables transcript tables compared";
ok($nblocks > 0, "the docs hold sql blocks ($nblocks)");

# Every database and role the docs created, dropped (the node is
# throwaway, but a test leaves nothing behind it did not need).
$node->safe_psql('postgres', "DROP DATABASE $_") for @dbs;
my @created = grep { !$roles_before{$_} } split /\n/,
  $node->safe_psql('postgres', 'SELECT rolname FROM pg_roles');
note "roles the docs created: @created";
$node->safe_psql('postgres', qq{DROP ROLE "$_"}) for @created;
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_roles'),
	scalar(keys %roles_before), 'every role the docs created is dropped');

$node->stop;
done_testing();
