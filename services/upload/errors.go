package upload

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInvalidDeclaration: the session's declared layout or SHA-256 is malformed.
	errInvalidDeclaration = errors.New("upload: invalid declaration")
	// ErrFileTooLarge: the declared size exceeds the configured maximum.
	errFileTooLarge = errors.New("upload: declared size exceeds the maximum")
	// ErrTooManyChunks: the declared chunk count exceeds the configured maximum.
	errTooManyChunks = errors.New("upload: declared chunk count exceeds the maximum")
	// ErrChunkSizeTooLarge: the declared chunk size exceeds the configured maximum.
	errChunkSizeTooLarge = errors.New("upload: chunk size exceeds the maximum")

	// ErrSessionNotFound: no session with that id.
	errSessionNotFound = errors.New("upload: no such session")
	// ErrNotOwner: the session or file belongs to someone else.
	errNotOwner = errors.New("upload: not yours")
	// ErrSessionNotOpen: the session no longer takes chunks (completed,
	// committed or failed).
	errSessionNotOpen = errors.New("upload: session is not open")
	// ErrSessionGone: the session was aborted or expired.
	errSessionGone = errors.New("upload: session aborted or expired")

	// ErrChunkOutOfRange: the chunk index is outside 0..chunk_count-1.
	errChunkOutOfRange = errors.New("upload: chunk index out of range")
	// ErrChunkTooLarge: the chunk body is longer than its slot.
	errChunkTooLarge = errors.New("upload: chunk larger than its declared size")
	// ErrChunkSize: the chunk body is shorter than its slot.
	errChunkSize = errors.New("upload: chunk shorter than its declared size")
	// ErrChunkConflict: the chunk is stored with different bytes.
	errChunkConflict = errors.New("upload: chunk already stored with different bytes")
	// ErrChunkInProgress: another request is writing this chunk right now.
	errChunkInProgress = errors.New("upload: chunk is being written by another request; retry")
	// ErrChunkChecksum: the chunk does not match the checksum sent with it.
	errChunkChecksum = errors.New("upload: chunk does not match its checksum")
	// ErrChecksumHeader: the checksum header is malformed or names another algorithm.
	errChecksumHeader = errors.New("upload: malformed checksum header")

	// ErrMissingChunks: complete was called before every chunk was stored.
	errMissingChunks = errors.New("upload: chunks missing")
	// ErrSHA256Mismatch: the bytes do not hash to the declared SHA-256 (UP-F5).
	errSHA256Mismatch = errors.New("upload: SHA-256 of the bytes differs from the declared one")
	// ErrSizeMismatch: the bytes are not the declared size (UP-F5).
	errSizeMismatch = errors.New("upload: size of the bytes differs from the declared one")

	// ErrNotCompleted: commit before a successful complete.
	errNotCompleted = errors.New("upload: session not completed")
	// ErrAlreadyCommitted: the session was committed under another name.
	errAlreadyCommitted = errors.New("upload: session already committed with other metadata")
	// ErrUploadExpired: the completed bytes were reclaimed before the commit.
	errUploadExpired = errors.New("upload: the uploaded bytes were reclaimed; upload again")
	// ErrInvalidName and ErrInvalidMetadata: the commit's metadata is unacceptable.
	errInvalidName     = errors.New("upload: invalid name")
	errInvalidMetadata = errors.New("upload: invalid metadata")

	// ErrFileNotFound: no file with that id.
	errFileNotFound = errors.New("upload: no such file")
	// ErrNotReady: the file is not published yet (UP-F4).
	errNotReady = errors.New("upload: file is not published yet")
	// ErrAlreadyPublished: a processing run found the file published.
	errAlreadyPublished = errors.New("upload: file already published")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errBody, http.StatusBadRequest, "body_incomplete"),
	httpx.Map(errInvalidDeclaration, http.StatusUnprocessableEntity, "invalid_declaration"),
	httpx.Map(errFileTooLarge, http.StatusRequestEntityTooLarge, "file_too_large"),
	httpx.Map(errTooManyChunks, http.StatusUnprocessableEntity, "too_many_chunks"),
	httpx.Map(errChunkSizeTooLarge, http.StatusUnprocessableEntity, "chunk_size_too_large"),
	httpx.Map(errSessionNotFound, http.StatusNotFound, "session_not_found"),
	httpx.Map(errNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(errSessionNotOpen, http.StatusConflict, "session_not_open"),
	httpx.Map(errSessionGone, http.StatusGone, "session_gone"),
	httpx.Map(errChunkOutOfRange, http.StatusUnprocessableEntity, "chunk_out_of_range"),
	httpx.Map(errChunkTooLarge, http.StatusRequestEntityTooLarge, "chunk_too_large"),
	httpx.Map(errChunkSize, http.StatusUnprocessableEntity, "chunk_size_mismatch"),
	httpx.Map(errChunkConflict, http.StatusConflict, "chunk_conflict"),
	httpx.Map(errChunkInProgress, http.StatusConflict, "chunk_in_progress"),
	httpx.Map(errChunkChecksum, http.StatusUnprocessableEntity, "chunk_checksum_mismatch"),
	httpx.Map(errChecksumHeader, http.StatusBadRequest, "invalid_checksum_header"),
	httpx.Map(errMissingChunks, http.StatusConflict, "missing_chunks"),
	httpx.Map(errSHA256Mismatch, http.StatusUnprocessableEntity, "sha256_mismatch"),
	httpx.Map(errSizeMismatch, http.StatusUnprocessableEntity, "size_mismatch"),
	httpx.Map(errNotCompleted, http.StatusConflict, "not_completed"),
	httpx.Map(errAlreadyCommitted, http.StatusConflict, "already_committed"),
	httpx.Map(errUploadExpired, http.StatusGone, "upload_expired"),
	httpx.Map(errInvalidName, http.StatusUnprocessableEntity, "invalid_name"),
	httpx.Map(errInvalidMetadata, http.StatusUnprocessableEntity, "invalid_metadata"),
	httpx.Map(errFileNotFound, http.StatusNotFound, "file_not_found"),
	httpx.Map(errNotReady, http.StatusConflict, "not_ready"),
}

// MissingChunksError is ErrMissingChunks with the indexes still missing.
type missingChunksError struct {
	Count   int   // declared chunks
	Missing []int // up to MaxListedMissing of them
	Total   int   // how many are missing
}

func (e *missingChunksError) Error() string {
	return fmt.Sprintf("%v: %d of %d chunks not stored yet", errMissingChunks, e.Total, e.Count)
}

func (e *missingChunksError) Unwrap() error { return errMissingChunks }
