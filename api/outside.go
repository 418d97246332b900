package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The served document is read by more than the e2e client: linters
// (Redocly, Spectral), validating proxies and mock servers (Prism) and
// client generators (oapi-codegen). outsideTools rewrites the merged
// document into the forms those tools read the same way a JSON Schema
// 2020-12 validator does, so each module's file can stay short:
//
//   - roles: a route names the roles that may call it in `x-roles`. OpenAPI
//     scopes belong to OAuth2 and OpenID Connect; on an HTTP bearer scheme
//     tools read them as undeclared scopes. A requirement still written the
//     old way, `security: [{bearer: [admin]}]`, is moved to x-roles here so
//     the served document never carries it.
//   - access in words: every operation's description ends with one sentence
//     saying who may call it (public, any role, or which roles), and an
//     operation with no description gets its summary as one, so a reader
//     of any generated page sees it.
//   - problems: a narrowed problem schema is written in the files as
//     `{$ref: Problem, properties: {code: {enum: [...]}}}`. Tools that
//     resolve a $ref by merging its siblings into the target replace
//     Problem's properties with {code} and then, under Problem's
//     additionalProperties: false, flag every member but code. Served as
//     `allOf: [{$ref: Problem}, {properties: {code: ...}}]` it means the
//     same under 2020-12 and under every merge-on-resolve tool.
//   - single-schema anyOf/oneOf/allOf wrappers that say nothing are
//     collapsed, and an enum of strings says `type: string` (generators
//     type it then: a problem's narrowed codes become constants);
//   - components nothing refers to any more are left out (edgeRules inlines
//     the 400 and 503 responses it widens, so a module's shared 400 may be
//     used only in its file, not in the served document).
func outsideTools(doc map[string]any) error {
	for route, op := range operations(doc) {
		if err := roles(op); err != nil {
			return fmt.Errorf("api: %s: %w", route, err)
		}
		describeAccess(doc, op)
	}
	doc["paths"] = rewrite(doc["paths"])
	doc["components"] = rewrite(doc["components"])
	pruneComponents(doc)
	return nil
}

func allStrings(vs []any) bool {
	for _, v := range vs {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return len(vs) > 0
}

// pruneComponents removes the schemas, responses, parameters and headers
// no $ref names, until none is left (a pruned response may have been the
// only user of a schema).
func pruneComponents(doc map[string]any) {
	comps, _ := doc["components"].(map[string]any)
	for {
		used := map[string]bool{}
		refs(doc, used)
		pruned := false
		for _, kind := range []string{"schemas", "responses", "parameters", "headers", "requestBodies"} {
			m, _ := comps[kind].(map[string]any)
			for name := range m {
				if !used["#/components/"+kind+"/"+name] {
					delete(m, name)
					pruned = true
				}
			}
		}
		if !pruned {
			return
		}
	}
}

func refs(v any, into map[string]bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			refs(e, into)
		}
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				into[s] = true
			}
			refs(e, into)
		}
	}
}

// operations yields every operation of the document with its route
// ("GET /path").
func operations(doc map[string]any) func(yield func(route string, op map[string]any) bool) {
	return func(yield func(string, map[string]any) bool) {
		paths, _ := doc["paths"].(map[string]any)
		for _, p := range slices.Sorted(maps.Keys(paths)) {
			item, _ := paths[p].(map[string]any)
			for _, m := range []string{"get", "head", "post", "put", "patch", "delete"} {
				op, ok := item[m].(map[string]any)
				if !ok {
					continue
				}
				if !yield(strings.ToUpper(m)+" "+p, op) {
					return
				}
			}
		}
	}
}

// roles moves role names written as bearer scopes into x-roles (see
// outsideTools). A route with both spellings must say the same in each.
func roles(op map[string]any) error {
	reqs, ok := op["security"].([]any)
	if !ok {
		return nil
	}
	var named []any
	for i, r := range reqs {
		req, _ := r.(map[string]any)
		scopes, _ := req["bearer"].([]any)
		if len(scopes) == 0 {
			continue
		}
		if named != nil && !slices.Equal(named, scopes) {
			return fmt.Errorf("two bearer requirements name different roles: %v and %v", named, scopes)
		}
		named = scopes
		req = maps.Clone(req)
		req["bearer"] = []any{}
		reqs[i] = req
	}
	if named == nil {
		return nil
	}
	if have, ok := op["x-roles"].([]any); ok && !slices.Equal(have, named) {
		return fmt.Errorf("x-roles %v but the security requirement names %v", have, named)
	}
	op["x-roles"] = named
	return nil
}

// Roles returns the roles an operation lists in x-roles (nil: any role the
// route's security admits).
func Roles(extensions map[string]any) []string {
	var out []string
	switch rs := extensions["x-roles"].(type) {
	case []any:
		for _, r := range rs {
			out = append(out, fmt.Sprint(r))
		}
	case []string:
		out = rs
	}
	return out
}

// describeAccess ends the operation's description with who may call it.
func describeAccess(doc map[string]any, op map[string]any) {
	sentence := access(doc, op)
	desc, _ := op["description"].(string)
	if desc == "" {
		desc, _ = op["summary"].(string)
	}
	desc = strings.TrimRight(desc, " \n")
	if desc != "" && !strings.HasSuffix(desc, ".") && !strings.HasSuffix(desc, ")") {
		desc += "."
	}
	if desc != "" {
		desc += " "
	}
	op["description"] = desc + sentence
}

func access(doc map[string]any, op map[string]any) string {
	sec, ok := op["security"].([]any)
	if !ok {
		sec, _ = doc["security"].([]any)
	}
	if len(sec) == 0 {
		return "Public: no token needed."
	}
	for _, r := range sec {
		if m, _ := r.(map[string]any); len(m) == 0 {
			return "Public; signed in, it may show more."
		}
	}
	req, _ := sec[0].(map[string]any)
	if _, ok := req["bearer"]; !ok {
		if _, ok := req["consoleSession"]; ok {
			return "Needs a console session (sign in at /console/signin)."
		}
		return "Needs the security scheme it lists."
	}
	rs := Roles(op)
	switch len(rs) {
	case 0:
		return "Needs a bearer token of any role."
	case 1:
		return fmt.Sprintf("Needs a bearer token with role `%s` (x-roles); any other role is 403.", rs[0])
	default:
		quoted := make([]string, len(rs))
		for i, r := range rs {
			quoted[i] = "`" + r + "`"
		}
		return fmt.Sprintf("Needs a bearer token with role %s or %s (x-roles); any other role is 403.",
			strings.Join(quoted[:len(quoted)-1], ", "), quoted[len(quoted)-1])
	}
}

// annotations are the keywords that may sit beside a $ref without changing
// what it validates.
var annotations = map[string]bool{"$ref": true, "description": true, "summary": true}

// rewrite walks v and returns it with every schema in the served form (see
// outsideTools): $ref with validating siblings becomes allOf, and a
// composition of one schema becomes that schema.
func rewrite(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = rewrite(x[i])
		}
		return x
	case map[string]any:
		for k, val := range x {
			if k == "example" || k == "examples" || k == "enum" || k == "const" {
				continue // values, not schemas
			}
			x[k] = rewrite(val)
		}
		if ref, ok := x["$ref"].(string); ok {
			rest := map[string]any{}
			for k, val := range x {
				if !annotations[k] {
					rest[k] = val
				}
			}
			if len(rest) > 0 {
				out := map[string]any{"allOf": []any{map[string]any{"$ref": ref}, rest}}
				for k := range annotations {
					if val, ok := x[k]; ok && k != "$ref" {
						out[k] = val
					}
				}
				return out
			}
		}
		if vs, ok := x["enum"].([]any); ok && x["type"] == nil && allStrings(vs) {
			// The same set of values; typed, a generator makes the enum a
			// named string type with constants (a narrowed problem code
			// keeps its values in a generated client) where an untyped one
			// comes out as interface{}.
			x["type"] = "string"
		}
		for _, k := range []string{"anyOf", "oneOf"} {
			list, ok := x[k].([]any)
			if !ok || len(list) != 1 {
				continue
			}
			one, _ := list[0].(map[string]any)
			if len(x) == 1 {
				return one // {anyOf: [S]} is S
			}
			if _, clash := x["allOf"]; !clash {
				delete(x, k)
				x["allOf"] = []any{one}
			}
		}
		return x
	}
	return v
}
