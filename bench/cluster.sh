# Sourced, not run, by the bench scripts (bench/*.sh) after `set -euo
# pipefail` and `cd` to the repository root:
#
#   . bench/cluster.sh NAME
#
# makes $tmp (/tmp/fencelab-NAME.XXXXXX, removed on exit), sets $pgbin (the
# newest PostgreSQL server binaries) and defines
#
#   as_postgres CMD ARGS…  CMD as the postgres user when run as root (the
#                          server refuses root), as is otherwise;
#   as_pg BIN ARGS…        the same for the server binary BIN of $pgbin;
#   throwaway_cluster      unless BENCH_DATABASE_URL names a server, starts
#                          a local cluster with PostgreSQL's durable defaults
#                          (fsync on) in $PGDATA_DIR and points
#                          BENCH_DATABASE_URL at it;
#   median V…              the median of the values.
#
# On exit the cluster in $PGDATA_DIR, if any, is stopped and $tmp removed.

tmp=$(mktemp -d "/tmp/fencelab-$1.XXXXXX")
chmod 755 "$tmp"
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
as_pg() { as_postgres "$pgbin/$1" "${@:2}"; }

cleanup() {
  if [[ -n "${PGDATA_DIR:-}" ]]; then
    as_pg pg_ctl -D "$PGDATA_DIR" -m fast stop >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

throwaway_cluster() {
  [[ -z "${BENCH_DATABASE_URL:-}" ]] || return 0
  PGDATA_DIR="$tmp/pg"
  local port=$(( 20000 + RANDOM % 20000 ))
  mkdir -p "$PGDATA_DIR"
  [[ $(id -u) == 0 ]] && chown postgres "$PGDATA_DIR" "$tmp"
  as_pg initdb -D "$PGDATA_DIR" -A trust -U postgres >/dev/null
  as_pg pg_ctl -D "$PGDATA_DIR" -l "$tmp/postgres.log" -w \
    -o "-p $port -k $tmp -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
  BENCH_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "throwaway cluster on port $port (durable defaults: fsync on)"
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
