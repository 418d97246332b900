package upload

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/upload"
)

// Experiments are the upload chapter's runnable claims.
var Experiments = []lab.Experiment{ChunksInRandomOrder, ProcessingLeaseTakenOver, ReadBeforePublish, WrongDeclaredSHA256}

// UP-01: a file's chunks arrive in random order, four at a time, and a
// third of them twice; one retransmit carries different bytes. Every
// retransmit of the same bytes is a 200, the different one a 409 that
// changes nothing, and the completed, committed, published file is the
// original byte for byte.
var ChunksInRandomOrder = lab.Experiment{
	ID:         "upload/chunks-in-random-order",
	Test:       "TestUP01ChunksInRandomOrderWithRetransmitsMakeTheDeclaredFile",
	Claim:      "chunks arriving in random order with retransmits make exactly the declared file",
	Invariants: []string{"upload"},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		const chunkSize = 256 << 10
		data, digest := Payload(1, 5<<20+12345) // 21 chunks, the last one short
		parts := Chunks(data, chunkSize)
		s := l.Open(t, l.Alice, data, chunkSize, digest)
		require.Equal(t, len(parts), s.ChunkCount)
		require.EqualValues(t, chunkSize, s.ChunkSize)

		rng := rand.New(rand.NewPCG(1, 2))
		order := rng.Perm(len(parts))
		resend := map[int]bool{}
		for _, n := range order[:len(parts)/3] {
			resend[n] = true
		}
		type sent struct {
			n      int
			status int
			body   string
		}
		results := make(chan sent, 2*len(parts))
		next := make(chan int)
		var wg sync.WaitGroup
		errs := lab.NewErrors(len(parts))
		for range 4 {
			wg.Go(func() {
				for n := range next {
					r, err := l.Send(context.Background(), PutReq(l.Alice, s.ID, n, parts[n], nil))
					if err != nil {
						errs.Add(fmt.Errorf("chunk %d: %w", n, err))
						continue
					}
					results <- sent{n, r.Status, string(r.Body)}
				}
			})
		}
		for _, n := range order {
			next <- n
		}
		close(next)
		wg.Wait()
		errs.Check(t)                            // on the test goroutine
		for _, n := range rng.Perm(len(parts)) { // retransmits, after the originals, in another order
			if resend[n] {
				r := l.Put(t, l.Alice, s.ID, n, parts[n], map[string]string{"Content-SHA256": SHA256Hex(parts[n])})
				results <- sent{n, r.Status, string(r.Body)}
			}
		}
		close(results)
		created, duplicates := 0, 0
		for r := range results {
			switch r.status {
			case http.StatusCreated:
				created++
			case http.StatusOK:
				duplicates++
				require.True(t, resend[r.n], "chunk %d answered 200 without a retransmit", r.n)
			default:
				t.Fatalf("chunk %d: %d %s", r.n, r.status, r.body)
			}
		}
		require.Equal(t, len(parts), created, "each chunk stored exactly once")
		require.Equal(t, len(resend), duplicates, "each retransmit of the same bytes is an idempotent 200")

		// Different bytes for a stored chunk: 409, and the stored bytes stay.
		forged := bytes.Clone(parts[3])
		forged[100] ^= 0xff
		r := l.Put(t, l.Alice, s.ID, 3, forged, nil)
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		require.Equal(t, "chunk_conflict", r.Code())

		r = l.Complete(t, l.Alice, s.ID)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &s)
		require.Equal(t, upload.SessionCompleted, s.State)
		again := l.Complete(t, l.Alice, s.ID)
		require.Equal(t, http.StatusOK, again.Status, "completing twice is idempotent: %s", again.Body)
		r = l.Put(t, l.Alice, s.ID, 0, parts[0], nil)
		require.Equal(t, http.StatusConflict, r.Status)
		require.Equal(t, "session_not_open", r.Code())

		r = l.Commit(t, l.Alice, s.ID, "lab-notes.bin")
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var f upload.File
		r.JSON(t, &f)
		retry := l.Commit(t, l.Alice, s.ID, "lab-notes.bin")
		require.Equal(t, http.StatusOK, retry.Status, "a retried commit returns the same file: %s", retry.Body)
		var f2 upload.File
		retry.JSON(t, &f2)
		require.Equal(t, f.ID, f2.ID)
		l.Publish(t, f)

		got := l.Read(t, l.Alice, f.ID, nil)
		require.Equal(t, http.StatusOK, got.Status, string(got.Body))
		require.True(t, bytes.Equal(data, got.Body), "the file read back is the file sent")
		require.Equal(t, `"`+digest+`"`, got.Header.Get("ETag"))
		onDisk, err := os.ReadFile(l.Store.BlobPath(digest))
		require.NoError(t, err)
		require.Equal(t, digest, SHA256Hex(onDisk))
		require.False(t, l.PartialExists(s.ID), "the partial file became the blob")

		require.Equal(t, len(parts), l.Count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1`, s.ID))
		require.Equal(t, 1, l.Count(t, `SELECT refs FROM upload_blob WHERE sha256 = $1`, digest))
		t.Logf("UP-01: %d chunks in random order, %d stored, %d retransmits answered 200, 1 forged retransmit 409", len(parts), created, duplicates)
		x.Assert(l.Pool, "upload")
	},
}

// UP-03: a processing run's lease lapses mid-run (forced with SQL), a
// second runner takes the job over, and the first wakes up. Whether it
// wakes after its successor published or before, it cannot publish: its
// completion carries a superseded fence, and its publish rolls back with
// it. The file is published once, by the second runner's fence.
var ProcessingLeaseTakenOver = lab.Experiment{
	ID:         "upload/processing-lease-taken-over",
	Test:       "TestUP03ProcessingLeaseExpiresSecondRunnerTakesOverOnePublish",
	Claim:      "a processing run whose lease lapsed is superseded: the second runner publishes once, the first cannot",
	Invariants: []string{"upload", "claim"},
	Naive:      "a run that publishes in a transaction of its own, before its fenced completion: runner A, superseded, wakes first and publishes; its completion is refused, the publish stays",
	Catches:    []string{"UP-F3"},
	Control:    "the same naive run alone: no lease lapses, no takeover",
	Explore:    takeoverExplore,
	Run: func(x *lab.X) {
		if x.Naive {
			naiveTakeover(x)
			return
		}
		cases := []string{"after", "before"} // the first run wakes after / before the takeover publishes
		for _, wakes := range cases {
			processingTakeover(x, wakes)
		}
	},
}

// processingTakeover is one UP-03 timeline: runner A claims the processing
// job and pauses before publishing; its lease lapses (forced with SQL),
// recovery raises the fence and runner B claims. A wakes after B published
// or before; either way its fenced publish is refused. The naive version
// is naiveTakeover (naive.go).
func processingTakeover(x *lab.X, wakes string) {
	t := x
	l := StartLab(x, lab.Options{})
	ctx := context.Background()
	_, f := l.CommittedReport(t)
	key := strconv.Itoa(int(f.JobID))

	gateA := l.Faults.Pause(faults.BeforeCommit, key)
	x.Cleanup(gateA.Release)
	a := l.ClaimProcess(t, "runner-a", f.JobID)
	x.Step(lab.Step{Actor: "runner-a", Action: "claim processing of " + f.ID, Outcome: lab.Accepted, Fence: a.Fence})
	errA := make(chan error, 1)
	go func() { errA <- l.Jobs.Execute(ctx, a) }()
	<-gateA.Reached()
	x.Step(lab.Step{Actor: "runner-a", Action: "processed; paused before publishing", Fence: a.Fence})

	b := l.TakeOver(x, f, a)

	switch wakes {
	case "after":
		require.NoError(t, l.Jobs.Execute(ctx, b), "runner B publishes")
		x.Step(lab.Step{Actor: "runner-b", Action: "publish " + f.ID, Outcome: lab.Accepted, Fence: b.Fence})
		gateA.Release()
		require.ErrorIs(t, <-errA, claim.ErrStaleFence, "runner A's late publish is refused")
		x.Step(lab.Step{Actor: "runner-a", Action: "publish " + f.ID, Outcome: lab.Refused, Fence: a.Fence, Note: "stale fence"})
	case "before":
		gateB := l.Faults.Pause(faults.BeforeCommit, key)
		x.Cleanup(gateB.Release)
		errB := make(chan error, 1)
		go func() { errB <- l.Jobs.Execute(ctx, b) }()
		<-gateB.Reached()
		x.Step(lab.Step{Actor: "runner-b", Action: "processed; paused before publishing", Fence: b.Fence})
		gateA.Release()
		require.ErrorIs(t, <-errA, claim.ErrStaleFence, "runner A is refused by its fence, not by the file's state")
		x.Step(lab.Step{Actor: "runner-a", Action: "publish " + f.ID, Outcome: lab.Refused, Fence: a.Fence, Note: "stale fence"})
		require.Equal(t, "processing", l.FileState(t, f.ID), "A's publish rolled back")
		gateB.Release()
		require.NoError(t, <-errB, "runner B publishes")
		x.Step(lab.Step{Actor: "runner-b", Action: "publish " + f.ID, Outcome: lab.Accepted, Fence: b.Fence})
	}

	var state, by string
	var fence int64
	require.NoError(t, l.Pool.QueryRow(ctx, `SELECT state, published_by, published_fence FROM file_object WHERE id = $1`, f.ID).
		Scan(&state, &by, &fence))
	require.Equal(t, "published", state)
	require.Equal(t, "runner-b", by)
	require.Equal(t, b.Fence, fence)
	require.Equal(t, 1, l.Count(t, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'succeeded'`, f.JobID))
	require.Positive(t, l.Count(t, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'rejected_stale' AND owner = 'runner-a'`, f.JobID),
		"runner A's refused write is on record")
	require.Equal(t, http.StatusOK, l.Read(t, l.Alice, f.ID, nil).Status)
	x.Assert(l.Pool, "upload", "claim")
}

// UP-04: a committed file is not readable until processing publishes it:
// the read is a 409 not_ready problem, not a byte of the file. Once
// published it streams with ETag = sha256, Range and conditional requests;
// it is its owner's alone.
var ReadBeforePublish = lab.Experiment{
	ID:         "upload/read-before-publish",
	Test:       "TestUP04ReadBeforePublishIs409NotReady",
	Claim:      "a committed file is not readable until processing publishes it: earlier reads are 409 not_ready",
	Invariants: []string{"upload"},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		data, digest := Payload(4, 1<<20)
		f := l.Committed(t, l.Alice, data, 256<<10, "photo.raw")

		r := l.Read(t, l.Alice, f.ID, nil)
		require.Equal(t, http.StatusConflict, r.Status)
		require.Equal(t, "not_ready", r.Code())
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
		require.False(t, bytes.Contains(r.Body, data[:64]), "no bytes of the file in the answer")
		r = l.Read(t, l.Alice, f.ID, map[string]string{"Range": "bytes=0-99"})
		require.Equal(t, http.StatusConflict, r.Status, "a range of an unpublished file is no different")

		l.Publish(t, f)
		r = l.Read(t, l.Alice, f.ID, nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, data, r.Body)
		etag := r.Header.Get("ETag")
		require.Equal(t, `"`+digest+`"`, etag)
		require.Equal(t, "bytes", r.Header.Get("Accept-Ranges"))

		r = l.Read(t, l.Alice, f.ID, map[string]string{"Range": "bytes=1000-1999"})
		require.Equal(t, http.StatusPartialContent, r.Status)
		require.Equal(t, data[1000:2000], r.Body)
		require.Equal(t, "bytes 1000-1999/1048576", r.Header.Get("Content-Range"))
		r = l.Read(t, l.Alice, f.ID, map[string]string{"If-None-Match": etag})
		require.Equal(t, http.StatusNotModified, r.Status)
		r = l.Read(t, l.Alice, f.ID, map[string]string{"Range": "bytes=2000000-"})
		require.Equal(t, http.StatusRequestedRangeNotSatisfiable, r.Status)

		r = l.Read(t, l.Bob, f.ID, nil)
		require.Equal(t, http.StatusForbidden, r.Status, "another user's file")
		var info upload.File
		r = l.Do(t, lab.Req{Method: "GET", Path: "/upload/files/" + f.ID + "/info", Token: l.Alice})
		require.Equal(t, http.StatusOK, r.Status)
		r.JSON(t, &info)
		require.Equal(t, upload.FilePublished, info.State)
		require.Equal(t, "application/octet-stream", info.ContentType)
		require.EqualValues(t, len(data), info.Summary.Bytes)
		require.Equal(t, "1.0 MiB", info.Summary.Human)
		x.Assert(l.Pool, "upload")
	},
}

// UP-05: the client declares a SHA-256 its bytes do not have. Every chunk
// is accepted (no chunk can know), completion fails with 422
// sha256_mismatch, the session is failed, and nothing references the
// bytes: no blob row, no blob file, no file_object, no partial file.
var WrongDeclaredSHA256 = lab.Experiment{
	ID:         "upload/wrong-declared-sha256",
	Test:       "TestUP05WrongDeclaredSHA256FailsCompletionNothingReferenced",
	Claim:      "a declared SHA-256 the bytes do not have fails completion and references nothing",
	Invariants: []string{"upload"},
	NoNaive:    "the check of the declared SHA-256 is the whole guarantee: without it nothing refuses, and no interleaving is involved",
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		data, actual := Payload(5, 700<<10)
		declared := SHA256Hex([]byte("some other file"))
		s := l.Open(t, l.Alice, data, 128<<10, declared)
		for n, c := range Chunks(data, 128<<10) {
			require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, n, c, nil).Status)
		}
		require.Equal(t, s.ChunkCount, l.Count(t, `SELECT hashed_chunks FROM upload_hash WHERE session_id = $1`, s.ID),
			"chunks sent in order were hashed as they arrived; complete only checks the digest")
		r := l.Complete(t, l.Alice, s.ID)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		require.Equal(t, "sha256_mismatch", r.Code())
		require.Equal(t, upload.SessionFailed, l.SessionState(t, s.ID))

		r = l.Complete(t, l.Alice, s.ID)
		require.Equal(t, http.StatusConflict, r.Status, "a failed session stays failed")
		r = l.Commit(t, l.Alice, s.ID, "never.bin")
		require.Equal(t, http.StatusConflict, r.Status)
		require.Equal(t, "session_not_open", r.Code())

		l.NothingReferenced(t, declared)
		l.NothingReferenced(t, actual)
		require.Empty(t, l.BlobFiles(t))
		require.False(t, l.PartialExists(s.ID), "the failed bytes are removed")
		require.Zero(t, l.Count(t, `SELECT count(*) FROM file_object`))
		x.Assert(l.Pool, "upload")
	},
}
