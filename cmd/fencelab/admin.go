package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
	"github.com/fencelab/fencelab/program"
)

func runMigrate(args []string) error {
	loadLocalEnv("")
	fs := newFlags("migrate", "migrate up | down [N] | version")
	url := fs.String("database-url", app.Env("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return errMigrateVerb
	}
	if *url == "" {
		return errNoDatabase
	}
	m := pg.Migrator{FS: migrations.FS, URL: *url}
	switch rest[0] {
	case "up":
		if err := m.Up(); err != nil {
			return connectHint(err, *url)
		}
	case "down":
		n := 1
		if len(rest) > 1 {
			v, err := strconv.Atoi(rest[1])
			if err != nil || v < 1 {
				return fmt.Errorf("down takes a positive step count, got %q", rest[1])
			}
			n = v
		}
		if err := m.Down(n); err != nil {
			return err
		}
	case "version":
	default:
		return fmt.Errorf("unknown verb %q: %w", rest[0], errMigrateVerb)
	}
	ctx := context.Background()
	pool, err := pg.Connect(ctx, *url, pg.PoolOptions{MaxConns: 1})
	if err != nil {
		return connectHint(err, *url)
	}
	defer pool.Close()
	st, err := pg.ReadMigrationState(ctx, pool, migrations.FS)
	if err != nil {
		return err
	}
	fmt.Printf("version %d (dirty=%v), latest %d\n", st.Version, st.Dirty, st.Latest)
	return nil
}

func runCheck(args []string) error {
	loadLocalEnv("")
	fs := newFlags("check", "check [--list] [MODULE|ID ...]")
	url := fs.String("database-url", app.Env("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	list := fs.Bool("list", false, "print every registered invariant (ID, module, chapter, statement) and exit")
	withSQL := fs.Bool("sql", false, "with --list: print each invariant's SQL too")
	explain := fs.String("explain", "", "print one invariant's statement, chapter, SQL and the experiments that exercise it, and exit")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall time limit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	invs := program.Invariants()
	if *explain != "" {
		return explainInvariant(invs, *explain)
	}
	if *list && *withSQL {
		for _, inv := range invs.Select(fs.Args()...) {
			printInvariant(inv)
		}
		return nil
	}
	if *list {
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tKIND\tMODULE\tCHAPTER\tSTATEMENT")
		for _, inv := range invs.Select(fs.Args()...) {
			kind := "data" // reports rows of data
			if inv.Schema {
				kind = "schema" // reports a guard missing from the catalog
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", inv.ID, kind, inv.Module, inv.Chapter, inv.Statement)
		}
		return w.Flush()
	}
	if *url == "" {
		return errNoDatabase
	}
	if len(invs.Select(fs.Args()...)) == 0 {
		return fmt.Errorf("no invariants match %v (try --list)", fs.Args())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pool, err := pg.Connect(ctx, *url, pg.PoolOptions{MaxConns: 2, ApplicationName: "fencelab-check"})
	if err != nil {
		return connectHint(err, *url)
	}
	defer pool.Close()
	results := invs.Run(ctx, pool, fs.Args()...)
	failed := 0
	for _, r := range results {
		if r.Holds() {
			fmt.Printf("ok    %-10s %s\n", r.ID, r.Statement)
		}
	}
	for _, r := range results {
		if !r.Holds() {
			failed++
			var sb strings.Builder
			invariant.Format(&sb, r)
			fmt.Printf("FAIL  %s", sb.String())
		}
	}
	fmt.Printf("%d invariants checked, %d violated\n", len(results), failed)
	if len(fs.Args()) == 0 || slices.Contains(fs.Args(), "outbox") {
		// Consumer positions and lag (chapter 4, the outbox): not a pass/fail
		// check, but where an operator looks next.
		fmt.Println("\noutbox consumers:")
		if err := outbox.WriteStatus(ctx, pool, os.Stdout); err != nil {
			fmt.Printf("  unavailable: %v\n", err)
		}
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}

func runToken(args []string) error {
	loadLocalEnv("")
	fs := newFlags("token", "token --sub SUBJECT [--role user|admin|service] [--ttl 24h]")
	sub := fs.String("sub", "", "subject (user id), e.g. user-0042")
	role := fs.String("role", "user", "user, admin or service")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity")
	secret := new(string)
	*secret = app.Env("FENCELAB_TOKEN_SECRET", "")
	fs.Var(app.SecretFlag(secret), "token-secret", "HMAC secret (FENCELAB_TOKEN_SECRET; never printed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *sub == "" {
		fs.Usage()
		return errUsage
	}
	r, err := httpx.ParseRole(*role)
	if err != nil {
		return err
	}
	if *secret == "" {
		return errNoSecret
	}
	a, err := httpx.NewAuth([]byte(*secret))
	if err != nil {
		return err
	}
	tok, err := a.Mint(*sub, r, *ttl)
	if err != nil {
		return err
	}
	fmt.Println(tok)
	return nil
}

// printInvariant prints an invariant with its SQL, as a reader reads it.
func printInvariant(inv invariant.Invariant) {
	fmt.Printf("%s  %s\n", inv.ID, inv.Statement)
	fmt.Printf("  module %s, chapter %s\n", inv.Module, chapterTitle(lab.ChapterOfInvariant(inv.ID)))
	if inv.SQL != "" {
		for _, line := range strings.Split(strings.TrimSpace(inv.SQL), "\n") {
			fmt.Printf("    %s\n", line)
		}
	} else {
		fmt.Println("    (checked in Go: it also looks outside the database)")
	}
	fmt.Println()
}

func chapterTitle(slug string) string {
	if c, ok := lab.ChapterOf(slug); ok {
		return fmt.Sprintf("%d %s — %s", c.N, c.Slug, c.Title)
	}
	return "foundation"
}

// explainInvariant prints one invariant and the experiments that exercise it.
func explainInvariant(reg *invariant.Registry, id string) error {
	invs := reg.Select(id)
	if len(invs) != 1 || invs[0].ID != id {
		return fmt.Errorf("no invariant %q; `fencelab check --list` shows them", id)
	}
	inv := invs[0]
	printInvariant(inv)
	fmt.Println("exercised by:")
	n := 0
	for _, e := range program.Experiments() {
		if e.Exercises(inv.ID, inv.Module) {
			n++
			how := ""
			if slices.Contains(e.Catches, inv.ID) {
				how = "  (its naive version breaks it: fencelab lab run " + e.ID + " --naive)"
			}
			fmt.Printf("  fencelab lab run %s%s\n", e.ID, how)
		}
	}
	if n == 0 {
		fmt.Println("  no lab experiment yet")
	}
	return nil
}
