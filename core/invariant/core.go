package invariant

// CORE-I0 exercises the registry end to end from the first migration on: a
// schema left dirty by a failed migration is a broken database, whatever the
// modules say.
var Core = []Invariant{
	{
		ID:        "CORE-I0",
		Module:    "core",
		Chapter:   "foundation",
		Statement: "every applied migration is clean (schema_migrations has a version and is not dirty)",
		SQL: `SELECT 'no migration applied' AS problem, NULL::bigint AS version
		        WHERE NOT EXISTS (SELECT 1 FROM schema_migrations)
		      UNION ALL
		      SELECT 'dirty', version FROM schema_migrations WHERE dirty`,
	},
}
