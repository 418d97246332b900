package upload_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestUP01ChunksInRandomOrderWithRetransmitsMakeTheDeclaredFile(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, upload.ChunksInRandomOrder)
}

func TestUP03ProcessingLeaseExpiresSecondRunnerTakesOverOnePublish(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, upload.ProcessingLeaseTakenOver)
}

func TestUP04ReadBeforePublishIs409NotReady(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, upload.ReadBeforePublish)
}

func TestUP05WrongDeclaredSHA256FailsCompletionNothingReferenced(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, upload.WrongDeclaredSHA256)
}
