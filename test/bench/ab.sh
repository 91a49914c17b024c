#!/bin/bash
#
# test/bench/ab.sh
#
# A/B benchmark: a git ref (A) against the working tree (B), in one session,
# the two builds measured side by side.
#
#   bash test/bench/ab.sh REF [RUNS]          # RUNS=4 paired runs
#   RL_BENCH_SECONDS=3 RL_BENCH_ONLY="c1 c8 many triggers down local instr" \
#       RL_BENCH_LOCK=/tmp/rl-heavy.lock bash test/bench/ab.sh 0318feb 4
#
# On a shared 2-core machine throughput moves by more than 3 % between
# identical builds run minutes apart (test/bench/results.md,
# 20261202T065343Z).  So the two builds run at the same time, taking turns
# measurement by measurement: each run of test/bench/run.sh is a pair of
# runs, one per build, each with its own PostgreSQL and Redis servers, that
# pass a turn between them (RL_BENCH_PAIR, see run.sh), so that each of
# A's slices sits next to B's same slice and only one of the two works at
# any moment.  Drift then hits both builds alike.  Which build goes first
# alternates from pair to pair, so RUNS should be even.  A section that
# times many statements in one measurement (triggers, memory, instr) is
# one turn, taken whole.
#
# One ratelimit.so is installed per PostgreSQL installation, so A gets one
# of its own: a copy of the system's PostgreSQL (binaries, libraries,
# share and headers) under a temporary directory, which PostgreSQL's
# relocatable paths make self-contained (pg_config, the server and
# $libdir all follow the copy).  A is built from `git archive REF` against
# that copy, B from the working tree's files (staged or not) against the
# system's.  Both run B's test/bench and test/lib, so the cases are the
# same.  Each pair installs both builds, checks that each installed library
# is its build (sha256, before and after), and runs.  The caller's checkout
# is only read; B's build is left installed at the end.
#
# RL_BENCH_SECONDS and RL_BENCH_ONLY pass through to run.sh (see there).
# RL_BENCH_LOCK names a lock file taken for each pair (install and run),
# so other users of the machine can interleave between pairs.
#
# Prints, per case and per target ratio: the median of the A runs and of
# the B runs with B against A in %, the median of the pairs' own B/A in
# %, the spread of each side's runs, and flags (WORSE) every target ratio
# whose paired B/A is more than 3 % below 1, and (MORE) every instruction
# count more than 3 % above A's.  Writes the table to
# test/bench/results/ab-<time>.tsv, and as a Markdown section ready for
# test/bench/results.md to ab-<time>.md; each run's own run.sh output and
# .tsv are kept beside them (ab-<time>-A1.log, ...).
#
# The whole script is one brace group, which bash reads in full before it
# runs any of it: an edit to this file during a run (an hour long) changes
# nothing in that run.

{
set -u -o pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 REF [RUNS]" >&2
	exit 2
fi
REF=$1
RUNS=${2:-4}
LOCK=${RL_BENCH_LOCK:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel) || exit 1
source "$HERE/../lib/servers.sh"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RES=$ROOT/test/bench/results
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

# A's PostgreSQL: the system's, copied to the same paths under $TMP/pg,
# without the extension's files.
PG_HOME=$(cd "$RL_PGBIN/.." && pwd -P)
mkdir "$TMP/pg"
for d in "$PG_HOME" "$("$RL_PG_CONFIG" --sharedir)" "$("$RL_PG_CONFIG" --includedir)"; do
	tar -cf - -C / "${d#/}" | tar -xf - -C "$TMP/pg" || exit 1
done
A_PGBIN=$TMP/pg$PG_HOME/$(basename "$RL_PGBIN")
A_PG_CONFIG=$A_PGBIN/pg_config
for d in "$("$A_PG_CONFIG" --pkglibdir)" "$("$A_PG_CONFIG" --sharedir)"; do
	case $d in
		"$TMP"/*) ;;
		*)
			echo "the copy of PostgreSQL under $TMP/pg does not relocate (it names $d)" >&2
			exit 1
			;;
	esac
done
rm -rf "$("$A_PG_CONFIG" --pkglibdir)"/ratelimit* "$("$A_PG_CONFIG" --pkglibdir)"/bitcode/ratelimit* \
	"$("$A_PG_CONFIG" --sharedir)"/extension/ratelimit*
declare -A CONF=([A]=$A_PG_CONFIG [B]=$RL_PG_CONFIG)
declare -A LIB=([A]=$("$A_PG_CONFIG" --pkglibdir)/ratelimit.so [B]=$("$RL_PG_CONFIG" --pkglibdir)/ratelimit.so)

# Compiling needs no lock; installing does (in each pair).
declare -A SUM
for side in A B; do
	echo "building $side in $TMP/$side"
	make -C "$TMP/$side" -s -j2 with_llvm=no PG_CONFIG="${CONF[$side]}" >"$TMP/build-$side.log" 2>&1 || {
		cat "$TMP/build-$side.log" >&2
		exit 1
	}
	SUM[$side]=$(sha256sum "$TMP/$side/ratelimit.so" | cut -c1-16)
done
echo "A = $REF ($A_ID), ratelimit.so ${SUM[A]}, PostgreSQL copied to $TMP/pg"
echo "B = working tree ($B_ID), ratelimit.so ${SUM[B]}"

# installed_is SIDE: true when SIDE's installed library is SIDE's build.
installed_is() {
	[ "$(sha256sum "${LIB[$1]}" 2>/dev/null | cut -c1-16)" = "${SUM[$1]}" ]
}

# B's servers, on ports of their own (A's are run.sh's defaults).
B_PORTS=(RL_BENCH_REDIS_PORT=6481 RL_BENCH_PG_PORT=54481
	RL_BENCH_INSTR_REDIS_PORT=6486 RL_BENCH_INSTR_PG_PORT=54486
	RL_BENCH_SENTINEL_PORT=26481 RL_BENCH_CLUSTER_PORT=6591 RL_BENCH_CLUSTER_PG_PORT=54591
	RL_BENCH_TLS_PLAIN_PORT=6493 RL_BENCH_TLS_PORT=6494 RL_BENCH_TLS_PG_PORT=54493)

# pair N: install both builds and run run.sh for each, taking turns, under
# the lock if any.  run.sh's own setup installs the tree it sits in, that
# is the same build.  The lock's descriptor is closed for run.sh, so the
# servers it starts in the background never hold it.
pair() {
	local n=$1 dir=$TMP/pair$1 rc
	mkdir "$dir" && echo 0 >"$dir/turn" || exit 1
	(
		if [ -n "$LOCK" ]; then
			echo "pair $n: waiting for $LOCK"
			flock 9 || exit 1
		fi
		echo "pair $n: $(date -u +%H:%M:%S) install and run"
		for side in A B; do
			make -C "$TMP/$side" -s with_llvm=no PG_CONFIG="${CONF[$side]}" install >/dev/null 2>&1 9>&- || exit 1
			installed_is "$side" || { echo "pair $n: installed ratelimit.so is not $side's build"; exit 1; }
		done
		# A is side 0 in odd pairs and side 1 in even ones (see run.sh).
		local sa=$(( (n + 1) % 2 ))
		RL_PGBIN=$A_PGBIN RL_BENCH_PAIR=$dir:$sa \
			bash "$TMP/A/test/bench/run.sh" >"$RES/ab-$STAMP-A$n.log" 2>&1 9>&- &
		local pa=$!
		env "${B_PORTS[@]}" RL_BENCH_PAIR="$dir:$((1 - sa))" \
			bash "$TMP/B/test/bench/run.sh" >"$RES/ab-$STAMP-B$n.log" 2>&1 9>&- &
		local pb=$! ra rb
		# Background jobs ignore SIGINT: pass an interrupt on to both.
		trap 'kill -TERM $pa $pb 2>/dev/null; exit 1' INT TERM
		wait $pa
		ra=$?
		wait $pb
		rb=$?
		for side in A B; do
			installed_is "$side" || { echo "pair $n: $side's ratelimit.so was replaced during the run"; exit 1; }
		done
		[ $ra = 0 ] && [ $rb = 0 ]
	) 9>>"${LOCK:-/dev/null}"
	rc=$?
	local side tsv
	for side in A B; do
		if [ $rc != 0 ]; then
			echo "pair $n: failed; the end of $RES/ab-$STAMP-$side$n.log:" >&2
			tail -20 "$RES/ab-$STAMP-$side$n.log" >&2
			continue
		fi
		tsv=$(sed -n 's/^results: //p' "$RES/ab-$STAMP-$side$n.log" | tail -1)
		[ -f "$tsv" ] || { echo "$side$n: no results file in its log" >&2; exit 1; }
		cp "$tsv" "$RES/ab-$STAMP-$side$n.tsv"
		echo "$side$n: done, $(grep -c . "$RES/ab-$STAMP-$side$n.tsv") rows"
	done
	[ $rc = 0 ] || exit 1
}

for n in $(seq "$RUNS"); do
	pair "$n"
done
echo "B's build is left installed (${LIB[B]}, ${SUM[B]})."

# The table: every case and ratio of the runs, in the order of run.sh.
OUT=$RES/ab-$STAMP.tsv
MD=$RES/ab-$STAMP.md
awk -F'\t' -v out="$OUT" '
	FNR == 1 {
		match(FILENAME, /-[AB][0-9]+\.tsv$/)
		side = substr(FILENAME, RSTART + 1, 1)
		run = substr(FILENAME, RSTART + 2, RLENGTH - 6) + 0
		if (run > nr) nr = run
		next
	}
	$2 !~ /^-?[0-9.]+$/ { next }
	{
		k = $1
		if (!(k in seen)) { seen[k] = 1; order[++nk] = k; unit[k] = $3 }
		val[k, side, run] = $2
		if ($3 == "met" || $3 == "MISSED") { unit[k] = "target"; if ($3 == "MISSED") missed[k, side] = 1 }
		else if ($1 ~ /^ratio /) unit[k] = "info"
	}
	# med(list of n numbers in a[1..n]): their median; lo and hi set.
	function med(a, n,   i, j, t) {
		if (n == 0) return ""
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		lo = a[1]; hi = a[n]
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	# side(k, s): the median of side s runs of case k; sets spr (%) and runs.
	function side_med(k, s,   a, n, r, m) {
		n = 0; runs = ""
		for (r = 1; r <= nr; r++) if ((k, s, r) in val) { a[++n] = val[k, s, r] + 0; runs = runs (n > 1 ? " " : "") val[k, s, r] }
		m = med(a, n)
		spr = (n > 1 && m != 0) ? sprintf("%.1f", 100 * (hi - lo) / m) : ""
		return m
	}
	# paired(k): the median over the pairs of B / A, in % from 1.
	function paired(k,   a, n, r) {
		n = 0
		for (r = 1; r <= nr; r++)
			if ((k, "A", r) in val && (k, "B", r) in val && val[k, "A", r] != 0)
				a[++n] = val[k, "B", r] / val[k, "A", r]
		return n ? sprintf("%+.1f", 100 * (med(a, n) - 1)) : ""
	}
	END {
		print "case\tunit\tmedian A\tmedian B\tB/A %\tpaired B/A %\tspread A %\tspread B %\tflag\truns A\truns B" > out
		for (i = 1; i <= nk; i++) {
			k = order[i]
			a = side_med(k, "A"); sa = spr; ra = runs
			b = side_med(k, "B"); sb = spr; rb = runs
			ch = (a != "" && b != "" && a != 0) ? sprintf("%+.1f", 100 * (b / a - 1)) : ""
			pc = paired(k)
			flag = ""
			if (unit[k] == "target" && pc != "" && pc + 0 < -3) flag = "WORSE"
			if (unit[k] ~ /^instr/ && ch != "" && ch + 0 > 3) flag = "MORE"
			if (unit[k] == "target" && (k, "B") in missed) flag = flag (flag ? " " : "") "B:MISSED"
			printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k, unit[k], a, b, ch, pc, sa, sb, flag, ra, rb > out
		}
	}' "$RES"/ab-"$STAMP"-[AB]*.tsv

SECS_DONE=$(( $(date +%s) - START ))
{
	echo "## $STAMP — A/B: $REF ($A_ID) against the working tree ($B_ID)"
	echo
	echo "\`bash test/bench/ab.sh $REF $RUNS\`, RL_BENCH_SECONDS=${RL_BENCH_SECONDS:-6}," \
		"RL_BENCH_ONLY=\"${RL_BENCH_ONLY:-}\"; $RUNS paired runs, A and B taking turns measurement by measurement;" \
		"ratelimit.so A ${SUM[A]}, B ${SUM[B]}; $(nproc) cores; $((SECS_DONE / 60)) min in all." \
		"A, B: medians of each side's runs; paired: the median of the pairs' own B/A;" \
		"spread = (max - min) / median of one side's runs;" \
		"WORSE = a target ratio's paired B/A more than 3 % below 1; MORE = instructions more than 3 % above A's." \
		"Per-run files: ab-$STAMP-A1.tsv, ..."
	echo
	echo "| case | unit | A | B | B/A | paired B/A | spread A | spread B | flag |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
	awk -F'\t' 'function pct(v) { return v != "" ? v " %" : "" }
		NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, pct($5), pct($6), pct($7), pct($8), $9 }' "$OUT"
} >"$MD"
cat "$MD"
echo
echo "worse by more than 3 % (paired): $(awk -F'\t' '$9 ~ /WORSE/' "$OUT" | wc -l) target ratio(s)"
echo "table: $OUT"
echo "Markdown for test/bench/results.md: $MD"
exit
}
