package upload

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidDeclaration: the session's declared layout or SHA-256 is malformed.
	ErrInvalidDeclaration = errors.New("upload: invalid declaration")
	// ErrFileTooLarge: the declared size exceeds the configured maximum.
	ErrFileTooLarge = errors.New("upload: declared size exceeds the maximum")
	// ErrTooManyChunks: the declared chunk count exceeds the configured maximum.
	ErrTooManyChunks = errors.New("upload: declared chunk count exceeds the maximum")
	// ErrChunkSizeTooLarge: the declared chunk size exceeds the configured maximum.
	ErrChunkSizeTooLarge = errors.New("upload: chunk size exceeds the maximum")

	// ErrSessionNotFound: no session with that id.
	ErrSessionNotFound = errors.New("upload: no such session")
	// ErrNotOwner: the session or file belongs to someone else.
	ErrNotOwner = errors.New("upload: not yours")
	// ErrSessionNotOpen: the session no longer takes chunks (completed,
	// committed or failed).
	ErrSessionNotOpen = errors.New("upload: session is not open")
	// ErrSessionGone: the session was aborted or expired.
	ErrSessionGone = errors.New("upload: session aborted or expired")

	// ErrChunkOutOfRange: the chunk index is outside 0..chunk_count-1.
	ErrChunkOutOfRange = errors.New("upload: chunk index out of range")
	// ErrChunkTooLarge: the chunk body is longer than its slot.
	ErrChunkTooLarge = errors.New("upload: chunk larger than its declared size")
	// ErrChunkSize: the chunk body is shorter than its slot.
	ErrChunkSize = errors.New("upload: chunk shorter than its declared size")
	// ErrChunkConflict: the chunk is stored with different bytes.
	ErrChunkConflict = errors.New("upload: chunk already stored with different bytes")
	// ErrChunkInProgress: another request is writing this chunk right now.
	ErrChunkInProgress = errors.New("upload: chunk is being written by another request; retry")
	// ErrChunkChecksum: the chunk does not match the checksum sent with it.
	ErrChunkChecksum = errors.New("upload: chunk does not match its checksum")
	// ErrChecksumHeader: the checksum header is malformed or names another algorithm.
	ErrChecksumHeader = errors.New("upload: malformed checksum header")

	// ErrMissingChunks: complete was called before every chunk was stored.
	ErrMissingChunks = errors.New("upload: chunks missing")
	// ErrSHA256Mismatch: the bytes do not hash to the declared SHA-256 (UP-F5).
	ErrSHA256Mismatch = errors.New("upload: SHA-256 of the bytes differs from the declared one")
	// ErrSizeMismatch: the bytes are not the declared size (UP-F5).
	ErrSizeMismatch = errors.New("upload: size of the bytes differs from the declared one")

	// ErrNotCompleted: commit before a successful complete.
	ErrNotCompleted = errors.New("upload: session not completed")
	// ErrAlreadyCommitted: the session was committed under another name.
	ErrAlreadyCommitted = errors.New("upload: session already committed with other metadata")
	// ErrUploadExpired: the completed bytes were reclaimed before the commit.
	ErrUploadExpired = errors.New("upload: the uploaded bytes were reclaimed; upload again")
	// ErrInvalidName and ErrInvalidMetadata: the commit's metadata is unacceptable.
	ErrInvalidName     = errors.New("upload: invalid name")
	ErrInvalidMetadata = errors.New("upload: invalid metadata")

	// ErrFileNotFound: no file with that id.
	ErrFileNotFound = errors.New("upload: no such file")
	// ErrNotReady: the file is not published yet (UP-F4).
	ErrNotReady = errors.New("upload: file is not published yet")
	// ErrAlreadyPublished: a processing run found the file published.
	ErrAlreadyPublished = errors.New("upload: file already published")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errBody, http.StatusBadRequest, "body_incomplete"),
	httpx.Map(ErrInvalidDeclaration, http.StatusUnprocessableEntity, "invalid_declaration"),
	httpx.Map(ErrFileTooLarge, http.StatusRequestEntityTooLarge, "file_too_large"),
	httpx.Map(ErrTooManyChunks, http.StatusUnprocessableEntity, "too_many_chunks"),
	httpx.Map(ErrChunkSizeTooLarge, http.StatusUnprocessableEntity, "chunk_size_too_large"),
	httpx.Map(ErrSessionNotFound, http.StatusNotFound, "session_not_found"),
	httpx.Map(ErrNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(ErrSessionNotOpen, http.StatusConflict, "session_not_open"),
	httpx.Map(ErrSessionGone, http.StatusGone, "session_gone"),
	httpx.Map(ErrChunkOutOfRange, http.StatusUnprocessableEntity, "chunk_out_of_range"),
	httpx.Map(ErrChunkTooLarge, http.StatusRequestEntityTooLarge, "chunk_too_large"),
	httpx.Map(ErrChunkSize, http.StatusUnprocessableEntity, "chunk_size_mismatch"),
	httpx.Map(ErrChunkConflict, http.StatusConflict, "chunk_conflict"),
	httpx.Map(ErrChunkInProgress, http.StatusConflict, "chunk_in_progress"),
	httpx.Map(ErrChunkChecksum, http.StatusUnprocessableEntity, "chunk_checksum_mismatch"),
	httpx.Map(ErrChecksumHeader, http.StatusBadRequest, "invalid_checksum_header"),
	httpx.Map(ErrMissingChunks, http.StatusConflict, "missing_chunks"),
	httpx.Map(ErrSHA256Mismatch, http.StatusUnprocessableEntity, "sha256_mismatch"),
	httpx.Map(ErrSizeMismatch, http.StatusUnprocessableEntity, "size_mismatch"),
	httpx.Map(ErrNotCompleted, http.StatusConflict, "not_completed"),
	httpx.Map(ErrAlreadyCommitted, http.StatusConflict, "already_committed"),
	httpx.Map(ErrUploadExpired, http.StatusGone, "upload_expired"),
	httpx.Map(ErrInvalidName, http.StatusUnprocessableEntity, "invalid_name"),
	httpx.Map(ErrInvalidMetadata, http.StatusUnprocessableEntity, "invalid_metadata"),
	httpx.Map(ErrFileNotFound, http.StatusNotFound, "file_not_found"),
	httpx.Map(ErrNotReady, http.StatusConflict, "not_ready"),
}

// MissingChunksError is ErrMissingChunks with the indexes still missing.
type MissingChunksError struct {
	Count   int   // declared chunks
	Missing []int // up to MaxListedMissing of them
	Total   int   // how many are missing
}

func (e *MissingChunksError) Error() string {
	return fmt.Sprintf("%v: %d of %d chunks not stored yet", ErrMissingChunks, e.Total, e.Count)
}

func (e *MissingChunksError) Unwrap() error { return ErrMissingChunks }
