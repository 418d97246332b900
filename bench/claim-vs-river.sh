#!/usr/bin/env bash
# Fenced Fencelab claims vs River (unfenced) on the same PostgreSQL, back to
# back: `fencelab bench claim` and bench/peers/river (a separate Go module)
# each enqueue then drain the same number of no-op jobs with the same number
# of workers and connections; the script prints every run and the ratio of
# the mean throughputs.
#
#   bench/claim-vs-river.sh [JOBS] [WORKERS] [ROUNDS]     (defaults 50000 2000 2)
#
# BENCH_DATABASE_URL selects the server; unset, a throwaway local cluster with
# PostgreSQL's durable defaults (fsync on) is started and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${1:-50000}
WORKERS=${2:-2000}
ROUNDS=${3:-2}

tmp=$(mktemp -d /tmp/fencelab-vs-river.XXXXXX)
chmod 755 "$tmp"
cleanup() {
  if [[ -n "${PGDATA_DIR:-}" ]]; then
    as_pg pg_ctl -D "$PGDATA_DIR" -m fast stop >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

as_pg() {
  local bin; bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$bin/$1" "${@:2}"; else "$bin/$1" "${@:2}"; fi
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
(cd bench/peers/river && go build -o "$tmp/river" .)

ours=() theirs=()
for round in $(seq "$ROUNDS"); do
  line=$("$tmp/fencelab" bench claim --jobs "$JOBS" --workers "$WORKERS" --database-url "$BENCH_DATABASE_URL" | tee /dev/stderr | grep '^RESULT')
  ours+=("$(sed -E 's/.*jobs_per_sec=([0-9.]+).*/\1/' <<<"$line")")
  line=$("$tmp/river" --jobs "$JOBS" --workers "$WORKERS" --database-url "$BENCH_DATABASE_URL" | tee /dev/stderr | grep '^RESULT')
  theirs+=("$(sed -E 's/.*jobs_per_sec=([0-9.]+).*/\1/' <<<"$line")")
done

mean() { local s=0; for v in "$@"; do s=$((s + ${v%.*})); done; echo $((s / $#)); }
a=$(mean "${ours[@]}"); b=$(mean "${theirs[@]}")
echo
echo "fencelab (fenced): ${ours[*]} jobs/s, mean $a"
echo "river (unfenced):  ${theirs[*]} jobs/s, mean $b"
awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio fencelab/river = %.2f  (%d jobs, %d workers, %d rounds, back to back)\n", a/b, '"$JOBS"', '"$WORKERS"', '"$ROUNDS"' }'
