# Sourced, not run, by bench/points-vs-pgbench.sh and
# bench/points-pg-instructions.sh: points_vars ACCOUNTS SHARDS sets the
# array points_vars to the pgbench -D variables bench/pgbench/points.sql
# reads, with a response body and event payload the size of the server's.
points_vars() {
  local body='{"id":123456,"kind":"debit","account_id":"bench-123456-00042","amount":7,"reason":"bench","balance":999993,"version":2,"entries":[{"account_id":"bench-123456-00042","amount":-7},{"account_id":"sys:redemption","amount":7}],"created_at":"2026-01-01T00:00:00.000000Z"}'
  points_vars=(-D accounts="$1" -D shards="$2" -D sysacct=sys:redemption -D scope=pgbench.debit
    -D reason=bench -D fingerprint='\x0000000000000000000000000000000000000000000000000000000000000000'
    -D lockttl=15000 -D topic=points.debited -D status=201 -D ctype=application/json -D body="$body")
}
