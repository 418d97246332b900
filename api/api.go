// Package api holds the deployable's HTTP contract: an OpenAPI 3.1 document,
// hand-written as one YAML file per module under openapi/, merged here into
// one document, served at GET /openapi.json and /openapi.yaml and rendered
// as a reference page at GET /docs/api. The e2e client validates every
// request and response against it (e2e/e2etest), so the document cannot
// drift from what the server does without a test failing.
package api

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sync"

	"go.yaml.in/yaml/v3"
)

//go:embed openapi/*.yaml
var files embed.FS

// merged is the document as one JSON value, built once per process.
var merged = sync.OnceValues(func() (map[string]any, error) {
	doc, err := merge(files)
	if err != nil {
		return nil, err
	}
	if err := edgeRules(doc); err != nil {
		return nil, err
	}
	return doc, outsideTools(doc) // last: it rewrites what edgeRules added too
})

// JSON returns the merged document as JSON (what GET /openapi.json serves).
var JSON = sync.OnceValues(func() ([]byte, error) {
	doc, err := merged()
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(doc, "", "  ")
})

// YAML returns the merged document as YAML (GET /openapi.yaml).
var YAML = sync.OnceValues(func() ([]byte, error) {
	doc, err := merged()
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(doc)
})

// merge reads openapi/*.yaml in name order. 00-base.yaml holds the top
// level (openapi, info, security, shared components); every other file
// holds a module's `paths` and `components` (and may add `tags`). A path,
// component or tag defined twice is an error: two modules must not claim
// the same thing.
func merge(fsys fs.FS) (map[string]any, error) {
	names, err := fs.Glob(fsys, "openapi/*.yaml")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	if len(names) == 0 || path.Base(names[0]) != "00-base.yaml" {
		return nil, fmt.Errorf("api: openapi/00-base.yaml must come first, have %v", names)
	}
	var doc map[string]any
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var part map[string]any
		if err := yaml.Unmarshal(b, &part); err != nil {
			return nil, fmt.Errorf("api: %s: %w", name, err)
		}
		if doc == nil {
			doc = part
			continue
		}
		for key, v := range part {
			switch key {
			case "paths":
				if err := mergeMap(doc, "paths", v, name); err != nil {
					return nil, err
				}
			case "components":
				cs, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("api: %s: components is not a map", name)
				}
				if doc["components"] == nil {
					doc["components"] = map[string]any{}
				}
				for kind, m := range cs {
					if err := mergeMap(doc["components"].(map[string]any), kind, m, name+": components"); err != nil {
						return nil, err
					}
				}
			case "tags":
				tags, _ := v.([]any)
				have, _ := doc["tags"].([]any)
				doc["tags"] = append(have, tags...)
			default:
				return nil, fmt.Errorf("api: %s: top-level key %q belongs in 00-base.yaml", name, key)
			}
		}
	}
	return doc, nil
}

func mergeMap(into map[string]any, key string, v any, where string) error {
	src, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("api: %s: %s is not a map", where, key)
	}
	dst, _ := into[key].(map[string]any)
	if dst == nil {
		dst = map[string]any{}
		into[key] = dst
	}
	for k, val := range src {
		if _, dup := dst[k]; dup {
			return fmt.Errorf("api: %s: %s %q is defined twice", where, key, k)
		}
		dst[k] = val
	}
	return nil
}

// edgeRules adds to every operation the answers the HTTP edge (core/httpx)
// gives before any module runs, so each module's file lists only its own:
//   - 400 with EdgeCode (text that cannot be stored in the path or query,
//     a malformed query), and on write routes BodyCode too;
//   - 408 body_timeout on write routes (a body that trickles past its
//     deadline);
//   - 503 retry | database_unavailable | overloaded on every route (the
//     database briefly away; bounded write admission full).
//
// A route's own 400 and 503 keep their codes; the edge's are added beside
// them (anyOf). Written once here rather than in every file because the
// edge answers them for every route alike.
func edgeRules(doc map[string]any) error {
	paths, _ := doc["paths"].(map[string]any)
	comps, _ := doc["components"].(map[string]any)
	responses, _ := comps["responses"].(map[string]any)
	if responses == nil {
		return fmt.Errorf("api: 00-base.yaml defines no components.responses")
	}
	schemas, _ := comps["schemas"].(map[string]any)
	enums := map[string][]any{} // component schemas that are a string enum and nothing else
	for name, s := range schemas {
		m, _ := s.(map[string]any)
		if vs, ok := m["enum"].([]any); ok && m["type"] == "string" {
			enums[name] = vs
		}
	}
	for _, pi := range paths {
		item, _ := pi.(map[string]any)
		for method, op := range item {
			o, ok := op.(map[string]any)
			if !ok || !slices.Contains([]string{"get", "head", "post", "put", "patch", "delete"}, method) {
				continue
			}
			rs, _ := o["responses"].(map[string]any)
			if rs == nil {
				continue
			}
			write := method != "get" && method != "head"
			codes := []any{map[string]any{"$ref": "#/components/schemas/EdgeCode"}}
			if write {
				codes = append(codes, map[string]any{"$ref": "#/components/schemas/BodyCode"})
			}
			rs["400"] = withCodes(rs["400"], responses, enums, codes)
			if _, ok := rs["503"]; ok {
				rs["503"] = withCodes(rs["503"], responses, enums, []any{map[string]any{"enum": []any{"retry", "database_unavailable", "overloaded"}}})
			} else {
				rs["503"] = map[string]any{"$ref": "#/components/responses/Unavailable"}
			}
			if write {
				if _, ok := rs["408"]; !ok {
					rs["408"] = map[string]any{"$ref": "#/components/responses/BodyTimeout"}
				}
			}
		}
	}
	return nil
}

// withCodes returns a problem response r (inline, a $ref to a component
// response, or nil) whose code also accepts every schema in extra. The
// codes are served as one enum, deduplicated (a route's own 503 already
// lists retry, say): one enum is what a generated client turns into one
// typed set of constants, where an anyOf of enums and $refs comes out as
// a bare string.
func withCodes(r any, components map[string]any, enums map[string][]any, extra []any) any {
	resp, _ := r.(map[string]any)
	if ref, ok := resp["$ref"].(string); ok {
		base, _ := components[path.Base(ref)].(map[string]any)
		resp = deepCopy(base)
	}
	if resp == nil {
		return map[string]any{
			"description": "Refused at the HTTP edge, before the route ran.",
			"content": map[string]any{"application/problem+json": map[string]any{"schema": map[string]any{
				"$ref": "#/components/schemas/Problem", "properties": map[string]any{"code": codeUnion(nil, extra, enums)}}}},
		}
	}
	content, _ := resp["content"].(map[string]any)
	media, _ := content["application/problem+json"].(map[string]any)
	schema, _ := media["schema"].(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		return resp
	}
	if code, ok := props["code"]; ok {
		props["code"] = codeUnion(code, extra, enums)
	}
	return resp
}

// codeUnion is one schema accepting code and every schema in extra: one
// enum when each is an enum or a $ref to a component schema that is one
// (BodyCode, EdgeCode), else their anyOf.
func codeUnion(code any, extra []any, enums map[string][]any) any {
	parts := extra
	if code != nil {
		parts = append([]any{code}, extra...)
	}
	var values []any
	for _, p := range parts {
		vs, ok := enumOf(p, enums)
		if !ok {
			return map[string]any{"anyOf": parts}
		}
		for _, v := range vs {
			if !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
	}
	return map[string]any{"type": "string", "enum": values}
}

// enumOf returns the values of s when s is {enum: [...]} or a $ref to a
// component schema of type string that is only an enum.
func enumOf(s any, enums map[string][]any) ([]any, bool) {
	m, _ := s.(map[string]any)
	if ref, ok := m["$ref"].(string); ok && len(m) == 1 {
		vs, ok := enums[path.Base(ref)]
		return vs, ok
	}
	vs, ok := m["enum"].([]any)
	for k := range m {
		if k != "enum" && k != "type" && k != "description" {
			return nil, false
		}
	}
	return vs, ok
}

func deepCopy(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
