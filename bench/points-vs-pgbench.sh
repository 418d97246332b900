#!/usr/bin/env bash
# `fencelab bench points` (debits over HTTP, through core/idem, the ledger
# and the outbox) against pgbench running the same SQL statements
# (bench/pgbench/points.sql), on the same PostgreSQL, back to back, at the
# same client count; prints every run and the ratio of mean throughputs.
#
#   bench/points-vs-pgbench.sh [CLIENTS] [ACCOUNTS] [SECONDS] [ROUNDS]   (defaults 32 1000 20 2)
#
# BENCH_DATABASE_URL selects the server; unset, a throwaway local cluster with
# PostgreSQL's durable defaults (fsync on) is started and removed
# afterwards. DB_CONNS sets the HTTP server's pool (default: the app's, 12);
# SHARDS the system-account shards (default 64; 1 is the naive hot row).
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-32}
ACCOUNTS=${2:-1000}
SECONDS_=${3:-20}
ROUNDS=${4:-2}
DB_CONNS=${DB_CONNS:-12}
SHARDS=${SHARDS:-64}

tmp=$(mktemp -d /tmp/fencelab-points-vs-pgbench.XXXXXX)
chmod 755 "$tmp"
cleanup() {
  if [[ -n "${PGDATA_DIR:-}" ]]; then
    as_pg pg_ctl -D "$PGDATA_DIR" -m fast stop >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
as_pg() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$pgbin/$1" "${@:2}"; else "$pgbin/$1" "${@:2}"; fi
}

if [[ -z "${BENCH_DATABASE_URL:-}" ]]; then
  PGDATA_DIR="$tmp/pg"
  port=$(( 20000 + RANDOM % 20000 ))
  mkdir -p "$PGDATA_DIR"
  [[ $(id -u) == 0 ]] && chown postgres "$PGDATA_DIR" "$tmp"
  as_pg initdb -D "$PGDATA_DIR" -A trust -U postgres >/dev/null
  as_pg pg_ctl -D "$PGDATA_DIR" -l "$tmp/postgres.log" -w \
    -o "-p $port -k $tmp -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
  BENCH_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "throwaway cluster on port $port (durable defaults: fsync on)"
fi

go build -o "$tmp/fencelab" ./cmd/fencelab
"$tmp/fencelab" migrate --database-url "$BENCH_DATABASE_URL" up >/dev/null
psql -q -v ON_ERROR_STOP=1 -v accounts="$ACCOUNTS" -f bench/pgbench/points-setup.sql "$BENCH_DATABASE_URL"

# A response body and event payload the size of the server's.
body='{"id":123456,"kind":"debit","account_id":"bench-123456-00042","amount":7,"reason":"bench","balance":999993,"version":2,"entries":[{"account_id":"bench-123456-00042","amount":-7},{"account_id":"sys:redemption","amount":7}],"created_at":"2026-01-01T00:00:00.000000Z"}'
pgbench_run() {
  "$pgbin/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_" -f bench/pgbench/points.sql \
    -D accounts="$ACCOUNTS" -D shards="$SHARDS" -D sysacct=sys:redemption -D scope=pgbench.debit \
    -D reason=bench -D fingerprint='\x0000000000000000000000000000000000000000000000000000000000000000' \
    -D lockttl=15000 -D topic=points.debited -D status=201 -D ctype=application/json -D body="$body" \
    "$BENCH_DATABASE_URL"
}

ours=() theirs=() p99s=()
for round in $(seq "$ROUNDS"); do
  line=$("$tmp/fencelab" bench points --clients "$CLIENTS" --accounts "$ACCOUNTS" --duration "${SECONDS_}s" \
           --hot-duration 0 --db-conns "$DB_CONNS" --shards "$SHARDS" --database-url "$BENCH_DATABASE_URL" | tee /dev/stderr | grep '^RESULT')
  ours+=("$(sed -E 's/.*debits_per_sec=([0-9.]+).*/\1/' <<<"$line")")
  p99s+=("$(sed -E 's/.*p99_ms=([0-9.]+).*/\1/' <<<"$line")")
  out=$(pgbench_run 2>&1 | tee /dev/stderr)
  grep -q 'number of failed transactions: 0 ' <<<"$out" || { echo "pgbench reported failures" >&2; exit 1; }
  theirs+=("$(grep -E '^tps' <<<"$out" | sed -E 's/tps = ([0-9.]+).*/\1/')")
done

mean() { local s=0; for v in "$@"; do s=$((s + ${v%.*})); done; echo $((s / $#)); }
a=$(mean "${ours[@]}"); b=$(mean "${theirs[@]}")
echo
echo "fencelab bench points (HTTP, pool $DB_CONNS): ${ours[*]} debits/s, mean $a; p99 ${p99s[*]} ms"
echo "pgbench, same SQL ($CLIENTS connections): ${theirs[*]} tps, mean $b"
awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio fencelab/pgbench = %.2f  ('"$CLIENTS"' clients, '"$ACCOUNTS"' accounts, '"$SECONDS_"' s, '"$ROUNDS"' rounds, back to back)\n", a/b }'
