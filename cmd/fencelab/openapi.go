package main

import (
	"os"

	"github.com/fencelab/fencelab/api"
)

// runOpenAPI prints the HTTP contract (what GET /openapi.json serves), so
// a client can be generated without a running server.
func runOpenAPI(args []string) error {
	fs := newFlags("openapi", "openapi [--yaml]")
	asYAML := fs.Bool("yaml", false, "print YAML instead of JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	doc, err := api.JSON()
	if *asYAML {
		doc, err = api.YAML()
	}
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(doc, '\n'))
	return err
}
