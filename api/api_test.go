package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/api"
)

// TestDocumentIsValidOpenAPI31: the merged document loads as OpenAPI 3.1,
// every $ref resolves, and it passes the loader's validation (schemas,
// examples, parameters).
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	t.Parallel()
	doc, err := api.Load()
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "openapi: %s", doc.OpenAPI)
	require.NoError(t, doc.Validate(context.Background(), openapi3.EnableExamplesValidation()))
	require.NotEmpty(t, doc.Paths.Map())
}

// TestServedDocumentIsInTheFormsOutsideToolsRead: what api.outsideTools
// promises, checked on the served JSON without any outside tool (the
// tools themselves run in e2e/contract): every operation says who may
// call it, public routes say security: [], no role is written as a
// bearer scope, no $ref carries validating siblings, no anyOf or oneOf
// holds one schema, and every component is referred to.
func TestServedDocumentIsInTheFormsOutsideToolsRead(t *testing.T) {
	t.Parallel()
	b, err := api.JSON()
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, []any{map[string]any{"bearer": []any{}}}, doc["security"], "every route needs a token unless it says otherwise")

	public := map[string]bool{
		"GET /healthz": true, "GET /readyz": true, "GET /metrics": true, "GET /openapi.json": true,
		"GET /openapi.yaml": true, "GET /docs/api": true, "GET /flashsale/skus/{sku}": true,
		"GET /s/{code}": true, "HEAD /s/{code}": true,
	}
	paths := doc["paths"].(map[string]any)
	ops := 0
	for p, item := range paths {
		for m, op := range item.(map[string]any) {
			o, ok := op.(map[string]any)
			if !ok || m == "parameters" {
				continue
			}
			ops++
			route := strings.ToUpper(m) + " " + p
			require.NotEmpty(t, o["description"], route)
			sec, has := o["security"].([]any)
			if public[route] {
				require.True(t, has, "%s is public and says so", route)
				require.Empty(t, sec, route)
				require.Contains(t, o["description"], "Public", route)
			}
			for _, r := range sec {
				for scheme, scopes := range r.(map[string]any) {
					require.Empty(t, scopes, "%s: roles go in x-roles, not %s scopes", route, scheme)
				}
			}
			for _, role := range api.Roles(o) {
				require.Contains(t, o["description"], "`"+role+"`", "%s: the description names its roles", route)
			}
		}
	}
	require.Greater(t, ops, 60)

	used := map[string]bool{}
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch x := v.(type) {
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s/%d", at, i), e)
			}
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				used[ref] = true
				for k := range x {
					require.Contains(t, []string{"$ref", "description", "summary"}, k, "%s: a $ref with a validating sibling", at)
				}
			}
			for _, k := range []string{"anyOf", "oneOf"} {
				if list, ok := x[k].([]any); ok {
					require.Greater(t, len(list), 1, "%s: %s of one schema", at, k)
				}
			}
			for k, e := range x {
				if k != "enum" && k != "example" && k != "examples" {
					walk(at+"/"+k, e)
				}
			}
		}
	}
	walk("#", doc)
	for kind, m := range doc["components"].(map[string]any) {
		if kind == "securitySchemes" {
			continue
		}
		for name := range m.(map[string]any) {
			require.True(t, used["#/components/"+kind+"/"+name], "unused component %s/%s", kind, name)
		}
	}
}
