package upload

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

// metrics are the module's Prometheus series.
type metrics struct {
	chunks      *prometheus.CounterVec
	chunkBytes  prometheus.Counter
	hashed      *prometheus.CounterVec
	completions *prometheus.CounterVec
	commits     prometheus.Counter
	publishes   prometheus.Counter
	gc          *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		chunks: promx.CounterVec(reg, "fencelab_upload_chunks_total",
			"Chunk PUTs by outcome: stored, duplicate (same bytes again), conflict, in_progress, rejected (any other 4xx or error).", "outcome"),
		chunkBytes: promx.Counter(reg, "fencelab_upload_chunk_bytes_total",
			"Bytes of chunks stored (retransmits not counted)."),
		hashed: promx.CounterVec(reg, "fencelab_upload_hashed_bytes_total",
			"Bytes fed to sessions' running SHA-256, by how: streamed (hashed as the chunk was written, in order) or reread (read back from the partial file: chunks that arrived ahead of a gap).", "how"),
		completions: promx.CounterVec(reg, "fencelab_upload_completions_total",
			"Completions by outcome: completed, or failed (size or SHA-256 differed from the declaration, UP-F5).", "outcome"),
		commits: promx.Counter(reg, "fencelab_upload_commits_total",
			"Files committed (file_object rows created)."),
		publishes: promx.Counter(reg, "fencelab_upload_publishes_total",
			"Files published by processing runs."),
		gc: promx.CounterVec(reg, "fencelab_upload_gc_total",
			"What GC reclaimed: sessions_expired, blobs_reclaimed, stray_blobs, stray_partials.", "what"),
	}
	return m
}

func (m *metrics) chunk(stored bool, err error) {
	outcome := "duplicate"
	switch {
	case errors.Is(err, errChunkConflict):
		outcome = "conflict"
	case errors.Is(err, errChunkInProgress):
		outcome = "in_progress"
	case err != nil:
		outcome = "rejected"
	case stored:
		outcome = "stored"
	}
	m.chunks.WithLabelValues(outcome).Inc()
}

func (m *metrics) collected(r GCReport) {
	m.gc.WithLabelValues("sessions_expired").Add(float64(r.SessionsExpired))
	m.gc.WithLabelValues("blobs_reclaimed").Add(float64(r.BlobsReclaimed))
	m.gc.WithLabelValues("stray_blobs").Add(float64(r.StrayBlobs))
	m.gc.WithLabelValues("stray_partials").Add(float64(r.StrayPartials))
}
