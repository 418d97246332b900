package upload_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	uploadlab "github.com/fencelab/fencelab/lab/upload"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestUP01ChunksInRandomOrderWithRetransmitsMakeTheDeclaredFile(t *testing.T) {
	e2etest.Experiment(t, uploadlab.ChunksInRandomOrder)
}

func TestUP03ProcessingLeaseExpiresSecondRunnerTakesOverOnePublish(t *testing.T) {
	e2etest.Experiment(t, uploadlab.ProcessingLeaseTakenOver)
}

func TestUP04ReadBeforePublishIs409NotReady(t *testing.T) {
	e2etest.Experiment(t, uploadlab.ReadBeforePublish)
}

func TestUP05WrongDeclaredSHA256FailsCompletionNothingReferenced(t *testing.T) {
	e2etest.Experiment(t, uploadlab.WrongDeclaredSHA256)
}
