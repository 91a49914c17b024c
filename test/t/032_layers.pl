# test/t/032_layers.pl
#
# The layers of the C code hold (issue 27): test/layers.sh, the check CI
# runs, is shown to pass a small source tree that keeps every rule and to
# fail, with the rule's own message, each copy of it with one violation
# planted; then it runs on the real src/.
#
# No server: the suite reads files only, in a temporary directory of its
# own.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";
my $checker = "$root/test/layers.sh";
my $tmp = tempdir('rl_layers_XXXX', TMPDIR => 1, CLEANUP => 1);

# A tree that keeps every rule: each layer, a function of each .c declared
# in its own header, a static function, an SQL-callable one, the trigger
# header included from ratelimit.c, hiredis under redis/, and the words
# "extern" and "#include" where they do not count (a comment, a string).
my %good = (
	'rl_types.h' => "typedef struct RlAnswer { int allowed; } RlAnswer;\n",
	'rl_guc.h' => "#include \"rl_types.h\"\n\nextern PGDLLIMPORT int rl_setting;\n"
	  . "extern void rl_guc_define(void);\n",
	'rl_guc.c' => "#include \"postgres.h\"\n\n#include \"utils/guc.h\"\n\n#include \"rl_guc.h\"\n\n"
	  . "int			rl_setting = 1;\n\n/* Defines the settings. */\nvoid\nrl_guc_define(void)\n{\n}\n",
	'rl_args.h' => "#include \"rl_types.h\"\n\nextern int	rl_check_key(const char *key,\n"
	  . "						 int len);\n",
	'rl_args.c' => "#include \"postgres.h\"\n\n#include \"rl_args.h\"\n#include \"rl_guc.h\"\n\n"
	  . "static int\nrl_key_len(const char *key)\n{\n\treturn strlen(key);\n}\n\n"
	  . "/*\n * A key is text.  extern int rl_not_a_decl(void);\n */\nint\n"
	  . "rl_check_key(const char *key,\n			 int len)\n{\n"
	  . "\tconst char *s = \"#include \\\"rl_engine.h\\\" extern\";\n\n"
	  . "\treturn rl_key_len(key) + len + (s != NULL);\n}\n",
	'rl_stats.h' => "#include \"rl_types.h\"\n\nextern void rl_stats_count(int n);\n"
	  . "extern void rl_stats_limiters_reset(void);\n",
	'rl_stats.c' => "#include \"postgres.h\"\n\n#include \"rl_stats.h\"\n\n"
	  . "void\nrl_stats_count(int n)\n{\n\t(void) n;\n}\n",
	'rl_stats_limiters.c' => "#include \"postgres.h\"\n\n#include \"fmgr.h\"\n\n#include \"rl_stats.h\"\n\n"
	  . "PG_FUNCTION_INFO_V1(rl_stats_limiters);\n\n/* SQL-callable: declared by the macro. */\n"
	  . "Datum\nrl_stats_limiters(PG_FUNCTION_ARGS)\n{\n\tPG_RETURN_VOID();\n}\n\n"
	  . "void\nrl_stats_limiters_reset(void)\n{\n}\n",
	'rl_cache.h' => "#include \"rl_types.h\"\n\nextern bool rl_cache_denied(const char *key);\n",
	'rl_cache.c' => "#include \"postgres.h\"\n\n#include \"rl_cache.h\"\n#include \"rl_stats.h\"\n\n"
	  . "bool\nrl_cache_denied(const char *key)\n{\n\treturn key == NULL;\n}\n",
	'rl_store.h' => "#include \"rl_types.h\"\n\ntypedef struct RlStore\n{\n"
	  . "\tbool		(*check) (const char *key, RlAnswer *answer);\n} RlStore;\n\n"
	  . "extern const RlStore *rl_redis_store(void);\nextern const RlStore *rl_local_store(void);\n",
	'redis/rl_redis.h' => "#include <hiredis/hiredis.h>\n\n#include \"rl_store.h\"\n\n"
	  . "extern redisReply *rl_redis_call(const char *cmd);\n\n#include \"rl_stats.h\"\n\n"
	  . "static inline void\nrl_redis_count(void)\n{\n\trl_stats_count(1);\n}\n",
	'redis/rl_redis.c' => "#include \"postgres.h\"\n\n#include <hiredis/hiredis.h>\n#include <openssl/ssl.h>\n\n"
	  . "#include \"rl_redis.h\"\n#include \"rl_scripts_gen.h\"\n#include \"rl_args.h\"\n\n"
	  . "redisReply *\nrl_redis_call(const char *cmd)\n{\n\treturn NULL;\n}\n\n"
	  . "const RlStore *\nrl_redis_store(void)\n{\n\treturn NULL;\n}\n",
	'local/rl_local.h' => "#include \"rl_store.h\"\n\nextern int	rl_local_step(int n);\n",
	'local/rl_local.c' => "#include \"postgres.h\"\n\n#include \"rl_local.h\"\n#include \"rl_cache.h\"\n\n"
	  . "int\nrl_local_step(int n)\n{\n\treturn n + 1;\n}\n\n"
	  . "const RlStore *\nrl_local_store(void)\n{\n\treturn NULL;\n}\n",
	'rl_policy.h' => "#include \"rl_store.h\"\n\nextern RlAnswer rl_policy_answer(int reason);\n",
	'rl_policy.c' => "#include \"postgres.h\"\n\n#include \"rl_policy.h\"\n#include \"rl_guc.h\"\n\n"
	  . "RlAnswer\nrl_policy_answer(int reason)\n{\n\tRlAnswer	a = {reason};\n\n\treturn a;\n}\n",
	'rl_engine.h' => "#include \"rl_types.h\"\n\nextern RlAnswer rl_check(const char *key);\n",
	'rl_engine.c' => "#include \"postgres.h\"\n\n#include \"rl_engine.h\"\n#include \"rl_policy.h\"\n"
	  . "#include \"rl_store.h\"\n#include \"rl_cache.h\"\n\n"
	  . "RlAnswer\nrl_check(const char *key)\n{\n\treturn rl_policy_answer(key == NULL);\n}\n",
	'ratelimit.c' => "#include \"postgres.h\"\n\n#include \"fmgr.h\"\n\n#include \"rl_engine.h\"\n"
	  . "#include \"rl_guc.h\"\n#include \"rl_trigger.h\"\n\nPG_MODULE_MAGIC;\n\n"
	  . "PG_FUNCTION_INFO_V1(rl_allow);\n\nvoid\n_PG_init(void)\n{\n\trl_guc_define();\n}\n\n"
	  . "Datum\nrl_allow(PG_FUNCTION_ARGS)\n{\n\tPG_RETURN_BOOL(rl_check(\"k\").allowed);\n}\n",
	'rl_batch.c' => "#include \"postgres.h\"\n\n#include \"rl_engine.h\"\n#include \"rl_args.h\"\n",
	'rl_layered.c' => "#include \"postgres.h\"\n\n#include \"rl_engine.h\"\n",
	'rl_acquire.c' => "#include \"postgres.h\"\n\n#include \"rl_engine.h\"\n",
	'rl_postgrest.h' => "#include \"rl_types.h\"\n\nextern bool rl_in_postgrest(void);\n",
	'rl_postgrest.c' => "#include \"postgres.h\"\n\n#include \"rl_postgrest.h\"\n#include \"rl_engine.h\"\n\n"
	  . "bool\nrl_in_postgrest(void)\n{\n\treturn false;\n}\n",
	'trigger/rl_trigger.h' => "#include \"commands/trigger.h\"\n\n#include \"rl_types.h\"\n\n"
	  . "extern void rl_trigger_init(void);\n",
	'trigger/rl_trigger.c' => "#include \"postgres.h\"\n\n#include \"rl_trigger.h\"\n#include \"rl_engine.h\"\n"
	  . "#include \"rl_postgrest.h\"\n\nvoid\nrl_trigger_init(void)\n{\n}\n",
	'README.md' => "Not C: not classified, not checked.\n",
);

my $ntree = 0;

# Writes a copy of the good tree, changed by $plant (a code ref given the
# tree's path), and returns its path.
sub tree
{
	my ($plant) = @_;
	my $dir = "$tmp/src" . $ntree++;
	for my $f (sort keys %good)
	{
		make_path(dirname("$dir/$f"));
		open my $fh, '>', "$dir/$f" or die "$dir/$f: $!";
		print $fh $good{$f};
		close $fh;
	}
	$plant->($dir) if $plant;
	return $dir;
}

# Appends $text to $dir/$file; returns the line number of its first line.
sub append
{
	my ($dir, $file, $text) = @_;
	my $line = 1;
	if (open my $in, '<', "$dir/$file")
	{
		$line++ while <$in>;
		close $in;
	}
	make_path(dirname("$dir/$file"));
	open my $fh, '>>', "$dir/$file" or die "$dir/$file: $!";
	print $fh $text;
	close $fh;
	return $line;
}

sub check
{
	my ($dir) = @_;
	my $out = `bash "$checker" "$dir" 2>&1`;
	return ($? >> 8, $out);
}

my ($rc, $out) = check(tree());
is($rc, 0, 'a tree that keeps every rule passes') or diag($out);
like($out, qr/^layers: ok \(\d+ files\)$/m, 'and says so');

# Each planted violation: [name, file, text to append, expected message
# after "file:line: ", and maybe a code ref that appends to a second file
# and returns the line it wrote, "{L}" in the message].
my @cases = (
	[ 'the engine includes a Redis store header', 'rl_engine.c', "#include \"rl_redis.h\"\n",
		'rl_engine.c (engine) includes redis/rl_redis.h (redis): headers under redis/ are private to redis/' ],
	[ 'the engine includes a store header by its path', 'rl_engine.c', "#include \"local/rl_local.h\"\n",
		'rl_engine.c (engine) includes local/rl_local.h (local): headers under local/ are private to local/' ],
	[ 'the Redis store includes the local store', 'redis/rl_redis.c', "#include \"rl_local.h\"\n",
		'redis/rl_redis.c (redis) includes local/rl_local.h (local): the two stores never include each other' ],
	[ 'the local store includes hiredis', 'local/rl_local.c', "#include <hiredis/hiredis.h>\n",
		'local/rl_local.c (local) includes <hiredis/hiredis.h>: <hiredis/...> may be included only under redis/' ],
	[ 'an entry point includes openssl', 'rl_acquire.c', "#include <openssl/ssl.h>\n",
		'rl_acquire.c (entry) includes <openssl/ssl.h>: <openssl/...> may be included only under redis/' ],
	[ 'a trigger includes the store interface', 'trigger/rl_trigger.c', "#include \"rl_store.h\"\n",
		'trigger/rl_trigger.c (entry) includes rl_store.h (store-interface): entry may include only engine entry leaf service' ],
	[ 'an entry point includes the failure policy', 'rl_layered.c', "#include \"rl_policy.h\"\n",
		'rl_layered.c (entry) includes rl_policy.h (policy): entry may include only engine entry leaf service' ],
	[ 'a store includes the engine', 'local/rl_local.c', "#include \"rl_engine.h\"\n",
		'local/rl_local.c (local) includes rl_engine.h (engine): local may include only leaf local service store-interface' ],
	[ 'the policy includes the engine', 'rl_policy.c', "#include \"rl_engine.h\"\n",
		'rl_policy.c (policy) includes rl_engine.h (engine): policy may include only leaf policy service store-interface' ],
	[ 'a service includes the policy', 'rl_stats.c', "#include \"rl_policy.h\"\n",
		'rl_stats.c (service) includes rl_policy.h (policy): service may include only leaf service store-interface' ],
	[ 'a leaf includes a service', 'rl_guc.c', "#include \"rl_cache.h\"\n",
		'rl_guc.c (leaf) includes rl_cache.h (service): leaf may include only leaf' ],
	[ 'a service includes a store\'s private header', 'rl_cache.c', "#include \"rl_local.h\"\n",
		'rl_cache.c (service) includes local/rl_local.h (local): headers under local/ are private to local/' ],
	[ 'an entry point other than ratelimit.c includes the trigger header', 'rl_batch.c',
		"#include \"rl_trigger.h\"\n",
		'rl_batch.c (entry) includes trigger/rl_trigger.h (entry): headers under trigger/ are private to trigger/ (and ratelimit.c)' ],
	[ 'the generated scripts header is included outside redis/', 'rl_engine.c',
		"#include \"rl_scripts_gen.h\"\n",
		'rl_engine.c (engine) includes redis/rl_scripts_gen.h (redis): headers under redis/ are private to redis/' ],
	[ 'an extern prototype in a .c file', 'rl_engine.c', "extern redisReply *rl_redis_call(const char *cmd);\n",
		'rl_engine.c (engine) declares "extern redisReply *rl_redis_call(const char *cmd)": no extern in a .c file, include the header that declares it' ],
	[ 'an extern variable in a .c file', 'trigger/rl_trigger.c', "extern PGDLLIMPORT int rl_setting;\n",
		'trigger/rl_trigger.c (entry) declares "extern PGDLLIMPORT int rl_setting": no extern in a .c file, include the header that declares it' ],
	[ 'an unclassified file', 'rl_newthing.c', "#include \"postgres.h\"\n",
		'rl_newthing.c (unclassified): unclassified file: add it to the layer table' ],
	[ 'an unclassified folder', 'net/rl_net.h', "extern int rl_net(void);\n",
		'net/rl_net.h (unclassified): unclassified file: add it to the layer table' ],
	[ 'a store function declared in a core header', 'local/rl_local.c',
		"\nint\nrl_local_extra(int n)\n{\n\treturn n;\n}\n",
		'local/rl_local.c (local) defines rl_local_extra(), declared in rl_args.h:{L} (service): a function of layer local declared in a header of layer service',
		sub { append($_[0], 'rl_args.h', "extern int rl_local_extra(int n);\n") } ],
	[ 'a store function declared in the other store\'s header', 'local/rl_local.c',
		"\nint\nrl_local_extra(int n)\n{\n\treturn n;\n}\n",
		'local/rl_local.c (local) defines rl_local_extra(), declared in redis/rl_redis.h:{L} (redis): a function of layer local declared in a header of layer redis',
		sub { append($_[0], 'redis/rl_redis.h', "extern int rl_local_extra(int n);\n") } ],
	[ 'a trigger function declared in an entry header outside trigger/', 'trigger/rl_trigger.c',
		"\nvoid\nrl_trigger_more(void)\n{\n}\n",
		'trigger/rl_trigger.c (entry) defines rl_trigger_more(), declared in rl_postgrest.h:{L} (entry): a function of trigger/ declared outside it',
		sub { append($_[0], 'rl_postgrest.h', "extern void rl_trigger_more(void);\n") } ],
	[ 'a file of redis/ calls a file above it', 'redis/rl_link.c',
		"static void *rl_up = (void *) rl_redis_call;\n",
		'redis/rl_link.c (rank 0) names rl_redis_call() of redis/rl_redis.c (rank 7): no file of redis/ calls a file above it (ORDER)' ],
	[ 'a file of redis/ calls a file of its own rank', 'redis/rl_cluster.c',
		"static void *rl_peer = (void *) rl_sentinel_ask;\n",
		'redis/rl_cluster.c (rank 4) names rl_sentinel_ask() of redis/rl_sentinel.c (rank 4): no file of redis/ calls a file of its own rank (ORDER)',
		sub {
			append($_[0], 'redis/rl_redis.h', "extern int rl_sentinel_ask(void);\n");
			append($_[0], 'redis/rl_sentinel.c', "int\nrl_sentinel_ask(void)\n{\n\treturn 0;\n}\n");
		} ],
	[ 'a file of redis/ that ORDER does not rank', 'redis/rl_new.c', "#include \"rl_redis.h\"\n",
		"redis/rl_new.c is not ranked in ORDER's line for redis/: add it there, above every file it calls" ],
	[ 'a non-static function declared in no header', 'rl_engine.c',
		"\nstatic int rl_helper(int n);\n\nint\nrl_helper(int n)\n{\n\treturn n;\n}\n",
		'rl_engine.c (engine) defines rl_helper(), declared in no header: make it static or declare it in a header of its layer' ],
);

for my $case (@cases)
{
	my ($name, $file, $text, $message, $also) = @$case;
	my ($line, $also_line);
	my $dir = tree(sub { $also_line = $also->($_[0]) if $also; $line = append($_[0], $file, $text) });
	# {L}: the line the second file was given.
	$message =~ s/\{L\}/$also_line/ if $also;
	# A definition is reported at the line of its name.
	my @text = split /\n/, $text;
	my ($at) = grep { $text[$_] =~ /^\w+\(/ } 0 .. $#text;
	$line += $at // 0;
	($rc, $out) = check($dir);
	is($rc, 1, "$name: exit 1");
	my @lines = grep { !/^layers: / } split /\n/, $out;
	is_deeply(\@lines, ["$file:$line: $message"], "$name: one violation, with its rule")
	  or diag($out);
	like($out, qr/^layers: 1 violation in 1 file$/m, "$name: counted");
}

# Two violations in two files are both reported and counted.
($rc, $out) = check(tree(sub {
	append($_[0], 'rl_engine.c', "#include \"rl_redis.h\"\n");
	append($_[0], 'rl_cache.c', "extern int x;\n");
}));
is($rc, 1, 'two violations: exit 1');
like($out, qr/^layers: 2 violations in 2 files$/m, 'two violations: both counted');

# A missing directory is an error of its own, not a pass.
($rc, $out) = check("$tmp/nowhere");
is($rc, 2, 'a missing source directory: exit 2');

# The real tree.
($rc, $out) = check("$root/src");
my ($summary) = $out =~ /^(layers: .*)$/m;
note("src/: " . ($summary // $out));
is($rc, 0, 'the real src/ keeps its layers') or diag($out);

done_testing();
