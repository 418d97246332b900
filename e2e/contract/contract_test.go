// Package contract checks the deployable against its OpenAPI document
// (package api): every registered route is documented and every documented
// path is served, and the document is served as JSON, YAML and a reference
// page. Every other e2e package checks each exchange it makes against the
// same document (e2etest's validating client).
package contract_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fencelab/fencelab/api"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// routeSet is "METHOD /path/{param}" for every route.
type routeSet map[string]bool

func (s routeSet) sorted() []string {
	out := make([]string, 0, len(s))
	for r := range s {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

func documented(t *testing.T, doc *openapi3.T) routeSet {
	t.Helper()
	out := routeSet{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out[strings.ToUpper(method)+" "+path] = true
		}
	}
	return out
}

// TestEveryRouteIsInTheContract compares the echo router's registered
// routes with the document's paths, both ways: a route added without its
// contract, or a documented route that no longer exists, fails here.
func TestEveryRouteIsInTheContract(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	doc, err := api.Load()
	require.NoError(t, err)

	registered := routeSet{}
	for _, r := range a.Echo.Routes() {
		if strings.HasPrefix(r.Method, "echo_") || strings.HasSuffix(r.Path, "/*") {
			continue // echo's own not-found / method-not-allowed entries; static file trees
		}
		registered[r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	contract := documented(t, doc)
	require.Greater(t, len(registered), 60, "the router lists the deployable's routes")

	var undocumented, unserved []string
	for _, r := range registered.sorted() {
		if !contract[r] {
			undocumented = append(undocumented, r)
		}
	}
	for _, r := range contract.sorted() {
		if !registered[r] {
			unserved = append(unserved, r)
		}
	}
	require.Empty(t, undocumented, "routes the server registers but the contract (api/openapi/*.yaml) does not document")
	require.Empty(t, unserved, "paths the contract documents but the server does not register")
}

// TestTheContractIsServed: GET /openapi.json parses as OpenAPI 3.1 and
// lists every registered route; /openapi.yaml is the same document; the
// reference page renders every operation without any external resource.
func TestTheContractIsServed(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})

	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/openapi.json"})
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	served, err := openapi3.NewLoader().LoadFromData(r.Body)
	require.NoError(t, err)
	require.True(t, served.IsOpenAPI31OrLater(), "openapi: %s", served.OpenAPI)
	require.NoError(t, served.Validate(context.Background()))
	embedded, err := api.Load()
	require.NoError(t, err)
	require.Equal(t, documented(t, embedded), documented(t, served))
	for _, route := range a.Echo.Routes() {
		if strings.HasPrefix(route.Method, "echo_") || strings.HasSuffix(route.Path, "/*") {
			continue
		}
		path := echoParam.ReplaceAllString(route.Path, "{$1}")
		require.NotNil(t, served.Paths.Find(path), "%s %s in /openapi.json", route.Method, path)
	}

	y := a.Do(t, e2etest.Req{Method: "GET", Path: "/openapi.yaml"})
	require.Equal(t, http.StatusOK, y.Status)
	var fromYAML, fromJSON map[string]any
	require.NoError(t, yaml.Unmarshal(y.Body, &fromYAML))
	require.NoError(t, yaml.Unmarshal(r.Body, &fromJSON)) // JSON is YAML
	require.Equal(t, fromJSON, fromYAML)

	page := a.Do(t, e2etest.Req{Method: "GET", Path: "/docs/api"})
	require.Equal(t, http.StatusOK, page.Status)
	require.True(t, strings.HasPrefix(page.Header.Get("Content-Type"), "text/html"))
	html := string(page.Body)
	for path, item := range served.Paths.Map() {
		for method := range item.Operations() {
			require.Contains(t, html, `id="`+strings.ToUpper(method)+"-", "%s %s", method, path)
		}
		require.Contains(t, html, path)
	}
	require.Contains(t, html, "insufficient_balance", "problem codes are listed")
	require.NotRegexp(t, `(?i)(src|href)="https?://`, html, "no external resources")
}
