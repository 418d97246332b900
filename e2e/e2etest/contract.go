package e2etest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/fencelab/fencelab/api"
	"github.com/fencelab/fencelab/core/lab"
)

// The contract check: every request Do and Send make and every response
// they read is validated against the OpenAPI document the deployable
// serves (package api). An undocumented status, response field or problem
// code — or a request the document does not allow — fails the test that
// sent it, so the document cannot drift from the server without a red
// test.
//
// Bad-input tests mark their requests Req.Invalid (or use BadInput()):
// those are sent as they are, and only their responses are checked.

// contractRouter is built once per test process: loading and resolving
// the document and compiling the route table is the expensive part.
//
// The document is OpenAPI 3.1 and kin-openapi loads it as such (3.1 $ref
// siblings included). Its 3.1 schema validator, though, compiles a JSON
// Schema 2020-12 validator on every call (about 5 ms of CPU per exchange,
// which slowed the 500-buyer experiments past their client timeouts), so
// the check validates the loaded document with kin's cached 3.0 schema
// visitor instead. The document keeps to the keywords that visitor
// enforces (enum rather than const, type lists with "null" rather than
// nullable); TestTheContractCheckCatchesDrift proves each kind of drift
// still fails.
var contractRouter = sync.OnceValues(func() (routers.Router, error) {
	b, err := api.JSON()
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(b) // a copy of our own: the version is changed below
	if err != nil {
		return nil, err
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the contract is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	doc.OpenAPI = "3.0.3" // validate with the cached 3.0 visitor (see above)
	return gorillamux.NewRouter(doc)
})

var contractOptions = &openapi3filter.Options{
	IncludeResponseStatus: true, // a status the route does not list is a failure
	MultiError:            true,
	// Authentication is the server's job (401/403 are documented
	// responses); the role lists are checked against the server's answers
	// in checkRole.
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
}

// checkContract returns the lab.App.Check of app.
func checkContract(app *lab.App) func(lab.Exchange) error {
	return func(x lab.Exchange) error {
		err := validateExchange(app, x)
		if err != nil && len(err.Error()) > 3000 {
			err = errors.New(err.Error()[:3000] + " …")
		}
		return err
	}
}

func validateExchange(app *lab.App, x lab.Exchange) error {
	router, err := contractRouter()
	if err != nil {
		return fmt.Errorf("load the contract: %w", err)
	}
	req := x.Request.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.Body))
	route, params, err := router.FindRoute(req)
	if err != nil {
		if x.Req.Invalid && x.Response.Status >= 400 && x.Response.Status < 500 {
			return nil // a deliberately wrong path or method, refused
		}
		return fmt.Errorf("%s %s is not in the contract: %w", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: contractOptions}
	if !x.Req.Invalid {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return fmt.Errorf("request breaks the contract (mark it Req.Invalid if that is the point): %w", err)
		}
	}
	if x.Req.Fault && x.Response.Status == 500 {
		return nil // an induced server fault, answered as one
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.Response.Status,
		Header: x.Response.Header, Options: contractOptions}
	out.SetBodyBytes(x.Response.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("response breaks the contract: %w", err)
	}
	return checkRole(app, route, x)
}

// checkRole: a route's documented roles (x-roles) must include every role the server
// lets through. A 2xx for a token whose role the document does not list
// means the document under-states who may call the route.
func checkRole(app *lab.App, route *routers.Route, x lab.Exchange) error {
	roles := api.Roles(route.Operation.Extensions)
	if x.Response.Status >= 300 || len(roles) == 0 {
		return nil
	}
	tok, ok := strings.CutPrefix(x.Request.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil
	}
	p, err := app.Auth.Verify(tok)
	if err != nil {
		return nil
	}
	if slices.Contains(roles, string(p.Role)) {
		return nil
	}
	return fmt.Errorf("role %q got %d but the contract's x-roles lists only %v", p.Role, x.Response.Status, roles)
}
