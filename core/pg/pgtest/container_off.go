//go:build fencelab_nocontainer

package pgtest

import "context"

// testcontainer is nil in test binaries built by ./test (the tag
// fencelab_nocontainer; see container.go): ./test installs PostgreSQL's
// binaries before any test runs, so the third choice is never needed, and
// leaving testcontainers-go out makes each PostgreSQL-using test binary a
// fifth cheaper to link. Should it be reached anyway (no binaries after
// all), pgserver's own container path (the docker CLI, as for `dev`)
// takes its place.
var testcontainer func(ctx context.Context, image string) (string, func(context.Context) error, error)
