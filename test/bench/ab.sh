#!/bin/bash
#
# test/bench/ab.sh
#
# A/B benchmark: a git ref (A) against the working tree (B), in one session.
#
#   bash test/bench/ab.sh REF [RUNS]          # RUNS=3: A B A B A B
#   RL_BENCH_SECONDS=2 RL_BENCH_ONLY="c1 many layered triggers local instr" \
#       RL_BENCH_LOCK=/tmp/rl-heavy.lock bash test/bench/ab.sh 0318feb 3
#
# On a shared 2-core machine throughput moves by far more than 3 % between
# identical builds (test/bench/results.md, 20261202T065343Z); the backend's
# instructions per check (section instr, test/bench/instr.sh, callgrind)
# repeat to well under 1 % and show the C side's cost: judge the
# restructuring's cost by those, and the throughput targets as met or not.
#
# Both builds install the same ratelimit.so into the one system PostgreSQL,
# so they cannot run side by side: each is built once in its own temporary
# copy (A from `git archive REF`, B from the working tree's files, staged or
# not), then the turns alternate A, B, A, B ...; each turn installs its
# build, checks that the installed library is that build (sha256, before
# and after the run), and runs test/bench/run.sh.  Both sides run B's
# test/bench and test/lib, so the cases are the same on both.  The caller's
# checkout is only read; B's build is left installed at the end.
#
# RL_BENCH_SECONDS and RL_BENCH_ONLY pass through to run.sh (see there).
# RL_BENCH_LOCK names a lock file taken for each turn (install and run),
# so other users of the machine can interleave between turns.
#
# Prints, per case and per target ratio: the median of the A runs and of
# the B runs, B against A in %, the spread of each side's runs, and flags
# (WORSE) every target ratio whose B median is more than 3 % below A's,
# and (MORE) every instruction count more than 3 % above A's.
# Writes the table to test/bench/results/ab-<time>.tsv, and as a Markdown
# section ready for test/bench/results.md to ab-<time>.md; each turn's own
# run.sh output and .tsv are kept beside them (ab-<time>-A1.log, ...).

set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 REF [RUNS]" >&2
	exit 2
fi
REF=$1
RUNS=${2:-3}
LOCK=${RL_BENCH_LOCK:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel) || exit 1
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RES=$ROOT/test/bench/results
PG_CONFIG=${PG_CONFIG:-pg_config}
LIB=$("$PG_CONFIG" --pkglibdir)/ratelimit.so
START=$(date +%s)
mkdir -p "$RES"

A_ID=$(git -C "$ROOT" rev-parse --short "$REF^{commit}") || exit 1
B_ID=$(git -C "$ROOT" rev-parse --short HEAD)
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=normal)" ] && B_ID="$B_ID+changes"

TMP=$(mktemp -d /tmp/rl-ab.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT
chmod 755 "$TMP"
mkdir "$TMP/A" "$TMP/B"

# B: the working tree's files as they are (tracked and new, not ignored).
(cd "$ROOT" && git ls-files -z -co --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf -) | tar -xf - -C "$TMP/B" || exit 1
# A: the ref's tree, with B's benchmark scripts.
git -C "$ROOT" archive "$A_ID" | tar -xf - -C "$TMP/A" || exit 1
rm -rf "$TMP/A/test/bench" "$TMP/A/test/lib"
mkdir -p "$TMP/A/test"
cp -a "$TMP/B/test/bench" "$TMP/B/test/lib" "$TMP/A/test/"

# Compiling needs no lock; installing does (in each turn).
declare -A SUM
for side in A B; do
	echo "building $side in $TMP/$side"
	make -C "$TMP/$side" -s -j2 with_llvm=no >"$TMP/build-$side.log" 2>&1 || {
		cat "$TMP/build-$side.log" >&2
		exit 1
	}
	SUM[$side]=$(sha256sum "$TMP/$side/ratelimit.so" | cut -c1-16)
done
echo "A = $REF ($A_ID), ratelimit.so ${SUM[A]}"
echo "B = working tree ($B_ID), ratelimit.so ${SUM[B]}"
[ "${SUM[A]}" = "${SUM[B]}" ] &&
	echo "note: both builds are the same file; the installed-library check cannot tell them apart"

# installed_is SIDE: true when the installed library is SIDE's build.
installed_is() {
	[ "$(sha256sum "$LIB" 2>/dev/null | cut -c1-16)" = "${SUM[$1]}" ]
}

# turn SIDE N: install SIDE's build and run run.sh, under the lock if any.
# run.sh's own setup installs the tree it sits in, that is the same build.
# The lock's descriptor is closed for run.sh, so the servers it starts in
# the background never hold it.
turn() {
	local side=$1 n=$2 dir=$TMP/$1 log=$RES/ab-$STAMP-$1$2.log rc
	(
		if [ -n "$LOCK" ]; then
			echo "$side$n: waiting for $LOCK"
			flock 9 || exit 1
		fi
		echo "$side$n: $(date -u +%H:%M:%S) install and run"
		make -C "$dir" -s with_llvm=no install >/dev/null 2>&1 9>&- || exit 1
		installed_is "$side" || { echo "$side$n: installed ratelimit.so is not $side's build"; exit 1; }
		bash "$dir/test/bench/run.sh" >"$log" 2>&1 9>&-
		rc=$?
		installed_is "$side" || { echo "$side$n: ratelimit.so was replaced during the run"; exit 1; }
		exit $rc
	) 9>>"${LOCK:-/dev/null}"
	rc=$?
	if [ $rc != 0 ]; then
		echo "$side$n: failed (exit $rc); the end of $log:" >&2
		tail -20 "$log" >&2
		exit 1
	fi
	local tsv
	tsv=$(sed -n 's/^results: //p' "$log" | tail -1)
	[ -f "$tsv" ] || { echo "$side$n: no results file in $log" >&2; exit 1; }
	cp "$tsv" "$RES/ab-$STAMP-$side$n.tsv"
	echo "$side$n: done, $(grep -c . "$RES/ab-$STAMP-$side$n.tsv") rows"
}

for n in $(seq "$RUNS"); do
	turn A "$n"
	turn B "$n"
done
echo "B's build is left installed ($LIB, ${SUM[B]})."

# The table: every case and ratio of the runs, in the order of run.sh.
OUT=$RES/ab-$STAMP.tsv
MD=$RES/ab-$STAMP.md
awk -F'\t' -v out="$OUT" '
	FNR == 1 { side = (FILENAME ~ /-A[0-9]+\.tsv$/) ? "A" : "B"; next }
	$2 !~ /^-?[0-9.]+$/ { next }
	{
		k = $1
		if (!(k in seen)) { seen[k] = 1; order[++nk] = k; unit[k] = $3 }
		n = ++cnt[k, side]
		val[k, side, n] = $2
		if ($3 == "met" || $3 == "MISSED") { unit[k] = "target"; st[k, side] = st[k, side] (n > 1 ? "," : "") $3 }
		else if ($1 ~ /^ratio /) unit[k] = "info"
	}
	function med(k, s,   n, i, j, t, a) {
		n = cnt[k, s]
		if (n == 0) return ""
		for (i = 1; i <= n; i++) a[i] = val[k, s, i] + 0
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		mn[s] = a[1]; mx[s] = a[n]
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	function spread(s, m) { return (m != 0 && cnt[k, s] > 1) ? sprintf("%.1f", 100 * (mx[s] - mn[s]) / m) : "" }
	function list(k, s,   i, r) { for (i = 1; i <= cnt[k, s]; i++) r = r (i > 1 ? " " : "") val[k, s, i]; return r }
	END {
		print "case\tunit\tmedian A\tmedian B\tB/A %\tspread A %\tspread B %\tflag\truns A\truns B" > out
		for (i = 1; i <= nk; i++) {
			k = order[i]
			a = med(k, "A"); sa = spread("A", a)
			b = med(k, "B"); sb = spread("B", b)
			ch = (a != "" && b != "" && a != 0) ? sprintf("%+.1f", 100 * (b / a - 1)) : ""
			flag = ""
			if (unit[k] == "target" && ch != "" && ch + 0 < -3) flag = "WORSE"
			if (unit[k] ~ /^instr/ && ch != "" && ch + 0 > 3) flag = "MORE"
			if (unit[k] == "target" && st[k, "B"] ~ /MISSED/) flag = flag (flag ? " " : "") "B:" st[k, "B"]
			printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k, unit[k], a, b, ch, sa, sb, flag, list(k, "A"), list(k, "B") > out
		}
	}' "$RES"/ab-"$STAMP"-[AB]*.tsv

SECS_DONE=$(( $(date +%s) - START ))
{
	echo "## $STAMP — A/B: $REF ($A_ID) against the working tree ($B_ID)"
	echo
	echo "\`bash test/bench/ab.sh $REF $RUNS\`, RL_BENCH_SECONDS=${RL_BENCH_SECONDS:-6}," \
		"RL_BENCH_ONLY=\"${RL_BENCH_ONLY:-}\"; turns A B alternating, $RUNS each;" \
		"ratelimit.so A ${SUM[A]}, B ${SUM[B]}; $(nproc) cores; $((SECS_DONE / 60)) min in all." \
		"Medians of the runs; spread = (max - min) / median of one side's runs;" \
		"WORSE = a target ratio more than 3 % below A's; MORE = instructions more than 3 % above. Per-run files: ab-$STAMP-A1.tsv, ..."
	echo
	echo "| case | unit | A | B | B/A | spread A | spread B | flag |"
	echo "|---|---|---:|---:|---:|---:|---:|---|"
	awk -F'\t' 'NR > 1 {
		printf "| %s | %s | %s | %s | %s%s | %s%s | %s%s | %s |\n", $1, $2, $3, $4,
			$5, ($5 != "" ? " %" : ""), $6, ($6 != "" ? " %" : ""), $7, ($7 != "" ? " %" : ""), $8 }' "$OUT"
} >"$MD"
cat "$MD"
echo
echo "worse by more than 3 %: $(awk -F'\t' '$8 ~ /WORSE/' "$OUT" | wc -l) target ratio(s)"
echo "table: $OUT"
echo "Markdown for test/bench/results.md: $MD"
