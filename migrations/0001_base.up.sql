SELECT 1; -- the sequence begins here; each module owns a version range (migrations.go)
