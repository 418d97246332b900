package api

import (
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

// Load parses the merged document with every $ref resolved (once per
// process; callers must not modify it).
var Load = sync.OnceValues(func() (*openapi3.T, error) {
	b, err := JSON()
	if err != nil {
		return nil, err
	}
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("api: load the OpenAPI document: %w", err)
	}
	return doc, nil
})
