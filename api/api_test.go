package api_test

import (
	"context"
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
