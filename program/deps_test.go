package program_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The deployable carries no test framework: the experiments it runs for
// `lab run` and the console assert with lab/require.
func TestTheDeployableCarriesNoTestFramework(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/fencelab").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/stretchr/testify") {
			t.Errorf("cmd/fencelab depends on %s", p)
		}
	}
}
