package points_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	pointslab "github.com/fencelab/fencelab/lab/points"
)

// PTS-01: 100 concurrent debits of 30 against a balance of 1,000 over real
// HTTP. Exactly 33 fit; the other 67 are refused with insufficient_balance
// and the balance ends at 10, never below 0 on the way (PTS-I1).
func TestPTS01ConcurrentDebitsNeverOverdraw(t *testing.T) {
	e2etest.Experiment(t, pointslab.ConcurrentDebits)
}

// PTS-02 (points/lost-response): the response to a committed debit is
// lost; the retry with the same key is the recorded answer, not a second
// debit.
func TestPTS02LostResponseRetryIsReplayedNotDebitedTwice(t *testing.T) {
	e2etest.Experiment(t, pointslab.LostResponse)
}

// PTS-03 (points/key-reused): the same key with a different amount or on
// another account is 422 idempotency_key_reused, and nothing is written.
func TestPTS03SameKeyOtherAmountIsRefusedAndWritesNothing(t *testing.T) {
	e2etest.Experiment(t, pointslab.KeyReused)
}

// PTS-04 (points/same-key-concurrently): one key sent at once by many
// clients makes one transaction.
func TestPTS04SameKeyConcurrentlyMakesOneTransaction(t *testing.T) {
	e2etest.Experiment(t, pointslab.SameKeyConcurrently)
}

// PTS-05 (points/corrupted-balance): a corrupted balance is reported by
// PTS-I4 (and `fencelab check`) and repaired from the ledger, on record.
func TestPTS05CorruptedBalanceIsReportedAndRepairedFromTheLedger(t *testing.T) {
	e2etest.Experiment(t, pointslab.CorruptedBalance)
}

// PTS-06 (points/interleaved): grants, debits and retries interleaved
// from 16 clients over 50 accounts keep the books balanced.
func TestPTS06InterleavedGrantsAndDebitsKeepTheBooksBalanced(t *testing.T) {
	e2etest.Experiment(t, pointslab.Interleaved)
}
