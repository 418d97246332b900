package shortlink_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/lab/labenv"
	shortlinklab "github.com/fencelab/fencelab/lab/shortlink"
	"github.com/fencelab/fencelab/program"
	"github.com/fencelab/fencelab/services/shortlink"
)

var aliasShape = regexp.MustCompile(`^[A-Za-z0-9_-]{3,64}$`)

// Issue 36: the reserved aliases are the router's own first path segments,
// read from the process's routes once they are mounted — console, which a
// hand-kept list forgot, among them — not a list somebody keeps.
func TestEveryRouteSegmentIsAReservedAlias(t *testing.T) {
	t.Parallel()
	p := labenv.Serve(t, program.Lab(), pgtest.URL(t), lab.Options{}, slog.New(slog.DiscardHandler))
	tok := p.App.Token(t, "user-0042", httpx.RoleUser)
	segments := app.RouteSegments(p.Echo)
	for _, want := range []string{"console", "points", "shortlink", "notify", "healthz", "metrics"} {
		require.Contains(t, segments, want)
	}
	tried := 0
	for _, seg := range segments {
		if !aliasShape.MatchString(seg) {
			continue // /s, /openapi.json: no alias could collide with them
		}
		for _, alias := range []string{seg, strings.ToUpper(seg[:1]) + seg[1:]} {
			r := p.App.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tok, Invalid: true,
				Body: shortlink.CreateRequest{Target: "https://book.example.test/", Alias: alias}})
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", alias, r.Body)
			require.Equal(t, "alias_reserved", r.Code(), alias)
			tried++
		}
	}
	require.Greater(t, tried, 10)
	// A word no route starts with is an alias like any other.
	ok := p.App.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tok,
		Body: shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "chapter-9"}})
	require.Equal(t, http.StatusCreated, ok.Status, string(ok.Body))
	require.Equal(t, 1, p.App.Count(t, `SELECT count(*) FROM shortlink_links`))
}

// Issue 36: a link into the service's own network — loopback, private,
// link-local (the metadata service), unspecified, localhost names, and the
// numeric spellings browsers read as loopback — is refused with a 422
// unless the deployment opts in. Names are never resolved.
func TestPrivateShortLinkTargetsAreRefused(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, lab.Options{})
	tok := a.UserToken(t, "user-0042")
	refused := []string{
		"http://127.0.0.1:8080/metrics",
		"http://127.9.9.9/",
		"http://[::1]/",
		"http://[::ffff:127.0.0.1]/",
		"http://[64:ff9b::a9fe:a9fe]/latest", // NAT64 of 169.254.169.254
		"http://169.254.169.254/latest/meta-data/",
		"http://[fe80::1%25eth0]/",
		"http://10.1.2.3/",
		"http://172.16.0.1/",
		"http://172.31.255.255/",
		"http://192.168.1.1/admin",
		"http://[fc00::1]/",
		"http://[fd00:ec2::254]/latest",
		"http://0.0.0.0:9000/",
		"http://100.64.0.1/",
		"http://localhost:8080/",
		"http://LOCALHOST./",
		"http://api.localhost/",
		"http://metadata.google.internal/computeMetadata/v1/",
		"http://2130706433/", // 127.0.0.1 as one number
		"http://0x7f.1/",     // and in hex, short form
		"http://0177.0.0.1/", // and in octal
		"http://127.1/",      // two parts
		"http://10.0.0.08/",  // numeric but no address: refused too
		"https://[::]/",      // unspecified
		"http://255.255.255.255/",
	}
	for _, target := range refused {
		r := a.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tok, Invalid: true,
			Body: shortlink.CreateRequest{Target: target}})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", target, r.Body)
		require.Equal(t, "target_not_public", r.Code(), target)
		require.Contains(t, string(r.Body), shortlink.EnvAllowPrivate, "the problem says how to opt in")
	}
	for i, target := range []string{
		"https://book.example.test/",
		"http://93.184.216.34/",
		"http://172.32.0.1/", // just past 172.16/12
		"http://[2001:db8::1]/",
		"http://localhost.example.test/", // a name like any other: not resolved
		"http://1.2.3.4.example.test/",
	} {
		l := a.MustCreate(t, tok, shortlink.CreateRequest{Target: target, Alias: fmt.Sprintf("pub-%d", i)})
		require.Equal(t, target, l.Target)
	}
	require.Equal(t, 6, a.Count(t, `SELECT count(*) FROM shortlink_links`), "no refused target was stored")

	// The deployment that shortens its own intranet's links opts in.
	in := shortlinklab.StartLab(e2etest.X(t), lab.Options{Settings: map[string]string{shortlink.EnvAllowPrivate: "true"}})
	itok := in.UserToken(t, "user-0042")
	for _, target := range []string{"http://10.1.2.3/wiki", "http://localhost:8080/", "http://[::1]/"} {
		l := in.MustCreate(t, itok, shortlink.CreateRequest{Target: target})
		require.Equal(t, target, l.Target)
	}
}
