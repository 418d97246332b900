#!/usr/bin/env bash
# `fencelab bench points` (debits over HTTP, through core/idem, the ledger
# and the outbox) against pgbench running the same SQL statements in the
# same transactions (bench/pgbench/points.sql), on the same PostgreSQL, at
# the same client count, in alternating rounds (fencelab first in odd
# rounds, pgbench first in even ones, so drift in the machine's load hits
# both sides alike). Prints every run, then one line
#
#   RESULT points ratio=<median of per-round ratios> p99_ms=<median p99> fencelab_per_sec=<median> pgbench_tps=<median> rounds=N clients=… accounts=… db_conns=… seconds=… [rate=… pgbench_p99_ms=…]
#
#   bench/points-vs-pgbench.sh [CLIENTS] [ACCOUNTS] [SECONDS] [ROUNDS]   (defaults 32 1000 20 3)
#
# BENCH_DATABASE_URL selects the server; unset, a throwaway local cluster with
# PostgreSQL's durable defaults (fsync on) is started and removed
# afterwards. DB_CONNS sets the HTTP server's pool (default: CLIENTS, the
# connections pgbench gets; the app's own default is 12, see
# docs/chapters/05-points.md); SHARDS the system-account shards (default
# 64; 1 is the naive hot row). PGBENCH_PIPELINE=0 runs the pgbench script
# without its pipelines (every statement its own round trip) for comparison.
# RATE=N offers N debits per second to both sides instead of the closed
# loop (fencelab bench points --rate, pgbench --rate: Poisson arrivals,
# latency from each one's scheduled start) and adds pgbench's own p99 from
# its per-transaction log: pgbench_p99_ms=…, the ceiling's tail at the
# same offered load.
# Every fencelab run checks the points, idem and outbox invariants and
# fails on a violation; the last step checks them once more after the last
# pgbench run.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-32}
ACCOUNTS=${2:-1000}
SECONDS_=${3:-20}
ROUNDS=${4:-3}
DB_CONNS=${DB_CONNS:-$CLIENTS}
SHARDS=${SHARDS:-64}
PGBENCH_PIPELINE=${PGBENCH_PIPELINE:-1}
RATE=${RATE:-0}
[[ $ROUNDS -ge 1 ]] || { echo "ROUNDS must be at least 1" >&2; exit 2; }

. bench/cluster.sh points-vs-pgbench
throwaway_cluster

go build -o "$tmp/fencelab" ./cmd/fencelab
"$tmp/fencelab" migrate --database-url "$BENCH_DATABASE_URL" up >/dev/null
psql -q -v ON_ERROR_STOP=1 -v accounts="$ACCOUNTS" -f bench/pgbench/points-setup.sql "$BENCH_DATABASE_URL"

. bench/pgbench/points-vars.sh
points_vars "$ACCOUNTS" "$SHARDS"
script=bench/pgbench/points.sql
if [[ $PGBENCH_PIPELINE == 0 ]]; then
  script="$tmp/points-unpipelined.sql"
  grep -v -E '^\\(start|end)pipeline' bench/pgbench/points.sql >"$script"
fi
pgbench_run() {
  local throttle=()
  if [[ $RATE != 0 ]]; then throttle=(-R "$RATE" -l --log-prefix="$tmp/pgbench_log"); fi
  "$pgbin/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_" "${throttle[@]}" -f "$script" "${points_vars[@]}" \
    "$BENCH_DATABASE_URL"
}

# CPU centiseconds the throwaway cluster has used: its live processes and
# the backends the postmaster has reaped (pgbench's exit with it). Empty
# with BENCH_DATABASE_URL: the server may be elsewhere.
cluster_cpu() {
  [[ -n ${PGDATA_DIR:-} ]] || return 0
  local pm total=0 pid f
  pm=$(head -1 "$PGDATA_DIR/postmaster.pid")
  for pid in $pm $(pgrep -P "$pm"); do
    f=$(awk '{ sub(/.*\) /, ""); print $12 + $13, $14 + $15 }' "/proc/$pid/stat" 2>/dev/null) || continue
    total=$(( total + ${f% *} ))
    [[ $pid == "$pm" ]] && total=$(( total + ${f#* } ))
  done
  echo "$total"
}

ours=() theirs=() p99s=() theirp99s=() ratios=()
run_ours() {
  local out line
  out=$("$tmp/fencelab" bench points --clients "$CLIENTS" --accounts "$ACCOUNTS" --duration "${SECONDS_}s" --rate "$RATE" \
          --hot-duration 0 --db-conns "$DB_CONNS" --shards "$SHARDS" --database-url "$BENCH_DATABASE_URL")
  printf '%s\n' "$out" >&2
  line=$(grep '^RESULT' <<<"$out")
  ours+=("$(sed -E 's/.*debits_per_sec=([0-9.]+).*/\1/' <<<"$line")")
  p99s+=("$(sed -E 's/.*p99_ms=([0-9.]+).*/\1/' <<<"$line")")
}
run_theirs() {
  local out c0 c1 n
  c0=$(cluster_cpu)
  rm -f "$tmp"/pgbench_log*
  out=$(/usr/bin/time -f 'pgbench client CPU %U %S' bash -c "$(declare -f pgbench_run); $(declare -p pgbin CLIENTS SECONDS_ script points_vars BENCH_DATABASE_URL RATE tmp); pgbench_run" 2>&1)
  printf '%s\n' "$out" >&2
  c1=$(cluster_cpu)
  grep -q 'number of failed transactions: 0 ' <<<"$out" || { echo "pgbench reported failures" >&2; exit 1; }
  theirs+=("$(grep -E '^tps' <<<"$out" | sed -E 's/tps = ([0-9.]+).*/\1/')")
  if [[ $RATE != 0 ]]; then
    # Each log line: client, transaction, latency µs, script, epoch s, µs,
    # schedule lag µs. Latency from the scheduled start is the two summed.
    theirp99s+=("$(cat "$tmp"/pgbench_log* | awk '{ print $3 + $7 }' | sort -n |
      awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.2f", v[i] / 1000 }')")
    echo "  pgbench p99 from its scheduled start: ${theirp99s[-1]} ms" >&2
  fi
  n=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' <<<"$out")
  awk -v n="$n" -v c0="${c0:-0}" -v c1="${c1:-0}" -v known="${c0:+1}" \
    '/^pgbench client CPU/ { printf "  pgbench CPU per transaction: %.3f ms in pgbench, %s ms in PostgreSQL\n", ($5 + $6) * 1000 / n, known ? sprintf("%.3f", (c1 - c0) * 10 / n) : "unknown" }' <<<"$out" >&2
}
for round in $(seq "$ROUNDS"); do
  echo "--- round $round of $ROUNDS: $(uptime)" >&2
  if (( round % 2 == 1 )); then run_ours; run_theirs; else run_theirs; run_ours; fi
  ratios+=("$(awk -v a="${ours[-1]}" -v b="${theirs[-1]}" 'BEGIN { printf "%.3f", a / b }')")
done
# pgbench's last rows too: the ledger balanced, every record finished.
"$tmp/fencelab" check --database-url "$BENCH_DATABASE_URL" points idem outbox >&2 ||
  { rc=$?; echo "fencelab check after the last round failed (status $rc)" >&2; exit 1; }

echo
echo "fencelab bench points (HTTP, pool $DB_CONNS$([[ $RATE != 0 ]] && echo ", $RATE/s offered")): ${ours[*]} debits/s; p99 ${p99s[*]} ms"
[[ $RATE == 0 ]] || echo "pgbench at $RATE/s offered: p99 ${theirp99s[*]} ms"
echo "pgbench, same SQL ($CLIENTS connections, pipelines $([[ $PGBENCH_PIPELINE == 0 ]] && echo off || echo on)): ${theirs[*]} tps"
echo "per-round ratios fencelab/pgbench: ${ratios[*]}  ($CLIENTS clients, $ACCOUNTS accounts, $SECONDS_ s, alternating); load now: $(uptime | sed 's/.*load average: //')"
rate_kv=""
[[ $RATE == 0 ]] || rate_kv=" rate=$RATE pgbench_p99_ms=$(median "${theirp99s[@]}")"
printf 'RESULT points ratio=%.2f p99_ms=%s fencelab_per_sec=%.0f pgbench_tps=%.0f rounds=%d clients=%d accounts=%d db_conns=%d seconds=%d%s\n' \
  "$(median "${ratios[@]}")" "$(median "${p99s[@]}")" "$(median "${ours[@]}")" "$(median "${theirs[@]}")" \
  "$ROUNDS" "$CLIENTS" "$ACCOUNTS" "$DB_CONNS" "$SECONDS_" "$rate_kv"
