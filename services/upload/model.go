package upload

import (
	"encoding/json"
	"time"
)

// SessionState is where an upload session is in its life.
type SessionState string

const (
	SessionOpen      SessionState = "open"      // accepting chunks
	SessionCompleted SessionState = "completed" // bytes verified and stored as a blob; waiting for commit
	sessionCommitted SessionState = "committed" // a file_object references the blob (terminal)
	SessionFailed    SessionState = "failed"    // the bytes did not match the declaration (terminal)
	SessionAborted   SessionState = "aborted"   // the owner gave up (terminal)
	SessionExpired   SessionState = "expired"   // idle past the grace period; GC ended it (terminal)
)

// FileState is a committed file's processing state.
type FileState string

const (
	FileProcessing FileState = "processing" // committed; not readable yet (UP-F4)
	FilePublished  FileState = "published"  // processed and readable
)

// CreateSessionRequest is the body of POST /upload/sessions: what the
// client promises to send.
type CreateSessionRequest struct {
	TotalSize  int64 `json:"total_size"`
	ChunkCount int   `json:"chunk_count"`
	// ChunkSize is the size of every chunk but the last (which holds the
	// rest). Zero: ceil(total_size / chunk_count).
	ChunkSize int64 `json:"chunk_size,omitempty"`
	// SHA256 of the whole file, lowercase or uppercase hex.
	SHA256 string `json:"sha256"`
}

// Session is an upload session as the API shows it.
type Session struct {
	ID         string       `json:"id"`
	Owner      string       `json:"owner"`
	TotalSize  int64        `json:"total_size"`
	ChunkCount int          `json:"chunk_count"`
	ChunkSize  int64        `json:"chunk_size"`
	SHA256     string       `json:"sha256"`
	State      SessionState `json:"state"`
	// Received counts stored chunks; Missing lists (up to MaxListedMissing
	// of) the ones still to send. Filled on reads of an open session.
	Received  int       `json:"received_chunks"`
	Missing   []int     `json:"missing_chunks,omitempty"`
	FileID    string    `json:"file_id,omitempty"`
	Failure   string    `json:"failure,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when GC may end the session if nothing happens to it
	// (open or completed sessions only).
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`

	touchedAt  time.Time
	blobSHA256 string
}

// MaxListedMissing bounds the missing chunk indexes a response lists.
const maxListedMissing = 1000

// chunkRange is the byte range of chunk n in the file.
func (s *Session) chunkRange(n int) (off, size int64) {
	off = int64(n) * s.ChunkSize
	return off, min(s.ChunkSize, s.TotalSize-off)
}

// ChunkResult answers a chunk PUT.
type chunkResult struct {
	Session string `json:"session_id"`
	N       int    `json:"n"`
	Size    int64  `json:"size"`
	// Stored is true when this request stored the chunk, false when it was
	// already stored with the same bytes (an idempotent retransmit).
	Stored bool `json:"stored"`
}

// CommitRequest is the body of POST /upload/sessions/{id}/commit.
type CommitRequest struct {
	Name string `json:"name"`
	// Metadata is the owner's own JSON object, stored as given.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// File is committed metadata (a file_object row).
type File struct {
	ID          string          `json:"id"`
	Owner       string          `json:"owner"`
	Name        string          `json:"name"`
	Metadata    json.RawMessage `json:"metadata"`
	Size        int64           `json:"size"`
	SHA256      string          `json:"sha256"`
	State       FileState       `json:"state"`
	ContentType string          `json:"content_type,omitempty"`
	Summary     *Summary        `json:"summary,omitempty"`
	SessionID   string          `json:"session_id"`
	JobID       int64           `json:"job_id"`
	CreatedAt   time.Time       `json:"created_at"`
	PublishedAt *time.Time      `json:"published_at,omitempty"`
}

// Summary is what processing learns about a file before publishing it.
type Summary struct {
	ContentType string `json:"content_type"`
	Bytes       int64  `json:"bytes"`
	Human       string `json:"human"`
}

// GCReport counts what one GC run did.
type GCReport struct {
	SessionsExpired int `json:"sessions_expired"`
	SessionsPurged  int `json:"sessions_purged"`
	BlobsReclaimed  int `json:"blobs_reclaimed"`
	StrayBlobs      int `json:"stray_blobs"`
	StrayPartials   int `json:"stray_partials"`
}

// processPayload is the processing job's payload.
type processPayload struct {
	FileID string `json:"file_id"`
}
