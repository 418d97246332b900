package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
)

// Module serves the contract: GET /openapi.json, GET /openapi.yaml and the
// reference page GET /docs/api. All three are public: the contract is no
// secret, and a client generator must be able to fetch it.
func Module() app.Module {
	return app.Module{
		Name: "api",
		Build: func(app.Deps) (app.Runtime, error) {
			// Fail at start, not on the first request, if the document is broken.
			if _, err := reference(); err != nil {
				return app.Runtime{}, err
			}
			return app.Runtime{Routes: func(e *echo.Echo) {
				e.GET("/openapi.json", serve(JSON, echo.MIMEApplicationJSON))
				e.GET("/openapi.yaml", serve(YAML, "application/yaml"))
				e.GET("/docs/api", serve(reference, echo.MIMETextHTMLCharsetUTF8))
			}}, nil
		},
	}
}

func serve(body func() ([]byte, error), contentType string) echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := body()
		if err != nil {
			return err
		}
		return c.Blob(http.StatusOK, contentType, b)
	}
}

//go:embed reference.html.tmpl
var referenceTemplate string

// reference renders the page once per process: the document is embedded,
// so the page cannot change while the process runs.
var reference = sync.OnceValues(func() ([]byte, error) {
	doc, err := Load()
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("api: the OpenAPI document is invalid: %w", err)
	}
	tmpl, err := template.New("reference").Funcs(template.FuncMap{
		"schema": schemaText,
		"codes":  problemCodes,
		"anchor": func(s string) string {
			return strings.NewReplacer("/", "-", "{", "", "}", "", ".", "-").Replace(strings.Trim(s, "/"))
		},
	}).Parse(referenceTemplate)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, referenceView(doc)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
})

type opView struct {
	Method, Path string
	Op           *openapi3.Operation
	Roles        []string // nil: public
	Secured      bool
	Responses    []respView
}

type respView struct {
	Status string
	Resp   *openapi3.Response
	Codes  []string
}

type pageView struct {
	Doc     *openapi3.T
	Tags    []tagView
	Schemas []schemaView
}

type tagView struct {
	Name, Description string
	Ops               []opView
}

type schemaView struct {
	Name string
	Ref  *openapi3.SchemaRef
}

func referenceView(doc *openapi3.T) pageView {
	byTag := map[string][]opView{}
	paths := doc.Paths.Map()
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
			op := paths[p].GetOperation(m)
			if op == nil {
				continue
			}
			v := opView{Method: m, Path: p, Op: op}
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			for _, req := range sec {
				if _, ok := req["bearer"]; ok {
					v.Secured = true
				}
			}
			v.Roles = Roles(op.Extensions)
			statuses := make([]string, 0, op.Responses.Len())
			for s := range op.Responses.Map() {
				statuses = append(statuses, s)
			}
			slices.Sort(statuses)
			for _, s := range statuses {
				r := op.Responses.Value(s)
				rv := respView{Status: s, Resp: r.Value}
				if mt := r.Value.Content.Get("application/problem+json"); mt != nil {
					rv.Codes = problemCodes(mt.Schema)
				}
				v.Responses = append(v.Responses, rv)
			}
			tag := "other"
			if len(op.Tags) > 0 {
				tag = op.Tags[0]
			}
			byTag[tag] = append(byTag[tag], v)
		}
	}
	var view pageView
	view.Doc = doc
	for _, t := range doc.Tags {
		view.Tags = append(view.Tags, tagView{Name: t.Name, Description: t.Description, Ops: byTag[t.Name]})
		delete(byTag, t.Name)
	}
	for name, ops := range byTag {
		view.Tags = append(view.Tags, tagView{Name: name, Ops: ops})
	}
	for name, s := range doc.Components.Schemas {
		view.Schemas = append(view.Schemas, schemaView{Name: name, Ref: s})
	}
	slices.SortFunc(view.Schemas, func(a, b schemaView) int { return strings.Compare(a.Name, b.Name) })
	return view
}

// problemCodes collects the `code` values a problem schema allows: the
// const or enum of its `code` property, through $ref siblings (which the
// loader folds into allOf for 3.1 documents) and anyOf/oneOf.
func problemCodes(s *openapi3.SchemaRef) []string {
	var out []string
	var codeValues func(*openapi3.SchemaRef)
	codeValues = func(c *openapi3.SchemaRef) {
		if c == nil || c.Value == nil {
			return
		}
		v := c.Value
		if v.Const != nil {
			out = append(out, fmt.Sprint(v.Const))
		}
		for _, e := range v.Enum {
			out = append(out, fmt.Sprint(e))
		}
		for _, sub := range slices.Concat(v.AllOf, v.AnyOf, v.OneOf) {
			codeValues(sub)
		}
	}
	var walk func(*openapi3.SchemaRef)
	walk = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil {
			return
		}
		if c, ok := s.Value.Properties["code"]; ok {
			codeValues(c)
		}
		for _, sub := range slices.Concat(s.Value.AllOf, s.Value.AnyOf, s.Value.OneOf) {
			walk(sub)
		}
	}
	walk(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// schemaText shows a schema as indented JSON with component references
// left as references (the page lists the components at the end).
func schemaText(s *openapi3.SchemaRef) string {
	if s == nil {
		return ""
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}
