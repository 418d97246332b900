package e2etest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/fencelab/fencelab/api"
)

// The contract check: every request Send makes and every response it reads
// is validated against the OpenAPI document the deployable serves (package
// api). An undocumented status, response field or problem code — or a
// request the document does not allow — fails the test that sent it, so
// the document cannot drift from the server without a red test.
//
// Bad-input tests mark their requests Req.Invalid: those are sent as they
// are, and only their responses are checked (a 4xx the route documents).

// contractRouter is built once per test process: loading and resolving
// the document and compiling the route table is the expensive part.
var contractRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := api.Load()
	if err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

var contractOptions = &openapi3filter.Options{
	IncludeResponseStatus: true, // a status the route does not list is a failure
	MultiError:            true,
	// Authentication is the server's job (401/403 are documented responses);
	// the role list is checked against the server's answer in checkRole.
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
}

// checkContract validates one exchange. body is the request body as sent.
func (a *App) checkContract(r Req, req *http.Request, body []byte, resp Response) error {
	router, err := contractRouter()
	if err != nil {
		return fmt.Errorf("load the contract: %w", err)
	}
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		if r.Invalid && resp.Status >= 400 && resp.Status < 500 {
			return nil // a deliberately wrong path or method, refused
		}
		return fmt.Errorf("%s %s is not in the contract: %w", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: contractOptions}
	if !r.Invalid {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return fmt.Errorf("request breaks the contract (mark it Req.Invalid if that is the point): %w", err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.Status,
		Header: resp.Header, Options: contractOptions}
	out.SetBodyBytes(resp.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("response breaks the contract: %w", err)
	}
	return a.checkRole(route, req, resp)
}

// checkRole: a route's documented roles must include every role the server
// lets through. A 2xx for a token whose role the document does not list
// means the document under-states who may call the route.
func (a *App) checkRole(route *routers.Route, req *http.Request, resp Response) error {
	if resp.Status >= 300 || route.Operation.Security == nil {
		return nil
	}
	tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil
	}
	p, err := a.Deps.Auth.Verify(tok)
	if err != nil {
		return nil
	}
	for _, sr := range *route.Operation.Security {
		roles, ok := sr["bearer"]
		if !ok {
			continue
		}
		if len(roles) == 0 || slices.Contains(roles, string(p.Role)) {
			return nil
		}
		return fmt.Errorf("role %q got %d but the contract lists only %v", p.Role, resp.Status, roles)
	}
	if len(*route.Operation.Security) == 0 {
		return nil
	}
	return errors.New("the contract names no bearer scheme for this route")
}
