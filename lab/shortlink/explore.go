package shortlink

// The short-links chapter under every schedule (fencelab lab explore
// shortlink/hundred-creators-one-alias): two creators of one alias.

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/shortlink"
)

// aliasRaceExplore: creators A and B each look the alias up (step "look")
// and then create it (step "create"). Guarded, the creation is the
// product's own request, one step (POST /shortlink/links: an insert that
// does nothing when the code is taken), so whatever each looked, one is
// told created and the other 409 alias_taken. Naive (check-then-insert,
// last writer wins), a creator that found the alias free writes it: the
// schedules where both look before either creates tell both "created"
// and SL-I1 reports the alias whose target changed under its first owner.
var aliasRaceExplore = &lab.Explore{
	Claim: "two creators of one alias, each look → create: under every schedule one is told created, the other 409 alias_taken, and the alias keeps the winner's target",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("look", "create")},
		{Name: "B", Steps: lab.Steps("look", "create")},
	},
	Run: exploreAliasRace,
}

func exploreAliasRace(x *lab.X) {
	l := StartLab(x, LabOptions{})
	if x.Naive {
		_, err := l.Pool.Exec(context.Background(), `DROP TRIGGER shortlink_links_guard ON shortlink_links`)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: "db", Action: "the naive schema: links may be overwritten"})
	}
	tokens := map[string]string{"A": l.UserToken(x, "user-a"), "B": l.UserToken(x, "user-b")}
	created := make(chan string, 2)
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		db := a.Pool(l.DBURL)
		owner := "user-" + map[string]string{"A": "a", "B": "b"}[a.Name]
		target := fmt.Sprintf("https://creator-%s.example.test/landing", a.Name)
		a.Step("look")
		var taken bool
		if err := db.QueryRow(ctx, aliasLook).Scan(&taken); err != nil {
			x.Error(a.Name, "look alias launch up", err)
			return
		}
		a.Say("look alias launch up", map[bool]string{true: "taken", false: "free"}[taken], "")
		a.Step("create")
		action := "create alias launch → " + target
		if x.Naive {
			if taken {
				a.Say(action, lab.Refused, "found it taken")
				return
			}
			_, err := db.Exec(ctx, naiveAliasWrite, target, owner)
			if err != nil {
				x.Error(a.Name, action, err)
				return
			}
			a.Say(action, lab.Accepted, "told created")
			created <- a.Name
			return
		}
		r, err := l.Send(ctx, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tokens[a.Name],
			Body: shortlink.CreateRequest{Target: target, Alias: "launch"}})
		switch {
		case err != nil:
			x.Error(a.Name, action, err)
		case r.Status == http.StatusCreated:
			a.Say(action, lab.Accepted, "201 created")
			created <- a.Name
		case r.Status == http.StatusConflict && r.Code() == "alias_taken":
			a.Say(action, lab.Refused, "409 alias_taken")
		default:
			x.Errorf("%s: %s: status %d: %s", a.Name, action, r.Status, r.Body)
		}
	})
	close(created)
	var told []string
	for c := range created {
		told = append(told, c)
	}
	x.Figure("told_created", len(told))
	if !x.Naive {
		require.Len(x, told, 1, "exactly one creator is told created")
	}
}
