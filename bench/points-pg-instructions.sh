#!/usr/bin/env bash
# Instructions the PostgreSQL backend executes per debit of the pgbench
# script (bench/pgbench/points.sql: the server's SQL, in the server's
# transactions), counted by cachegrind on a throwaway cluster: one client,
# WARM transactions, then WARM+N, so connection start-up and cold caches
# cancel out. Unlike CPU time, the count does not move with the machine's
# load, so it compares schemas and statements on a shared machine. Ends
# with one line
#
#   RESULT points_pg_instructions per_debit=<instructions> n=N
#
#   bench/points-pg-instructions.sh [N] [WARM]   (defaults 400 20; needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-400}
WARM=${2:-20}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt install valgrind)" >&2; exit 2; }
. bench/cluster.sh points-pg-instructions
PGDATA_DIR="$tmp/pg" # stopped on exit
mkdir -p "$PGDATA_DIR" "$tmp/cg"
[[ $(id -u) == 0 ]] && chown postgres "$PGDATA_DIR" "$tmp/cg" "$tmp"
port=$(( 20000 + RANDOM % 20000 ))
url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"

as_pg initdb -D "$PGDATA_DIR" -A trust -U postgres >/dev/null
# Every process of the cluster under cachegrind (the backends are forks of
# the postmaster); each writes its count when it exits. Autovacuum off: its
# workers would count nothing of ours, but they slow everything down.
as_postgres bash -c "nohup valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=$tmp/cg/cg.%p \
  $pgbin/postgres -D $PGDATA_DIR -p $port -k $tmp -c listen_addresses=127.0.0.1 -c autovacuum=off \
  >$tmp/postgres.log 2>&1 &"
for _ in $(seq 120); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && break; sleep 1; done
"$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" || { echo "the cluster under valgrind did not start" >&2; exit 1; }

go build -o "$tmp/fencelab" ./cmd/fencelab
"$tmp/fencelab" migrate --database-url "$url" up >/dev/null
psql -q -v ON_ERROR_STOP=1 -v accounts=1000 -f bench/pgbench/points-setup.sql "$url"

. bench/pgbench/points-vars.sh
points_vars 1000 64
# backend_instructions T: run T transactions on one connection; print the
# instructions of the backend that served them.
# settle waits until no other client backend is left and each has written
# its count, so that the files before and after a run differ by that run's.
settle() {
  for _ in $(seq 120); do
    [[ $(psql -Atq -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" "$url") == 0 ]] && break
    sleep 1
  done
  sleep 3
}
backend_instructions() {
  local before after f most=0 n
  settle
  before=$(ls "$tmp/cg")
  "$pgbin/pgbench" -n -M prepared -c 1 -t "$1" -f bench/pgbench/points.sql "${points_vars[@]}" \
    "$url" >"$tmp/pgbench.out" 2>&1
  grep -q 'number of failed transactions: 0 ' "$tmp/pgbench.out" || { cat "$tmp/pgbench.out" >&2; exit 1; }
  settle
  after=$(comm -13 <(echo "$before") <(ls "$tmp/cg"))
  # The largest new count is the run's backend; the others are pgbench's
  # short set-up connection and settle's own, start-up alone.
  for f in $after; do
    n=$(sed -nE 's/^summary: ([0-9]+).*/\1/p' "$tmp/cg/$f")
    (( ${n:-0} > most )) && most=$n
  done
  echo "$most"
}
short=$(backend_instructions "$WARM")
long=$(backend_instructions $(( WARM + N )))
echo "backend instructions: $short for $WARM transactions, $long for $(( WARM + N ))"
"$tmp/fencelab" check --database-url "$url" points idem outbox >&2 ||
  { echo "fencelab check failed" >&2; exit 1; }
printf 'RESULT points_pg_instructions per_debit=%d n=%d\n' $(( (long - short) / N )) "$N"
