DROP TABLE IF EXISTS points_repair;
DROP TABLE IF EXISTS points_ledger_entry;
DROP TABLE IF EXISTS points_ledger_txn;
DROP TABLE IF EXISTS points_system_shard;
DROP TABLE IF EXISTS points_account;
DROP FUNCTION IF EXISTS points_append_only();
