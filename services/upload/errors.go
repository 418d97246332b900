package upload

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errInvalidDeclaration: the session's declared layout or SHA-256 is malformed.
	errInvalidDeclaration = Errors.New(http.StatusUnprocessableEntity, "invalid_declaration", "upload: invalid declaration")
	// errFileTooLarge: the declared size exceeds the configured maximum.
	errFileTooLarge = Errors.New(http.StatusRequestEntityTooLarge, "file_too_large", "upload: declared size exceeds the maximum")
	// errTooManyChunks: the declared chunk count exceeds the configured maximum.
	errTooManyChunks = Errors.New(http.StatusUnprocessableEntity, "too_many_chunks", "upload: declared chunk count exceeds the maximum")
	// errChunkSizeTooLarge: the declared chunk size exceeds the configured maximum.
	errChunkSizeTooLarge = Errors.New(http.StatusUnprocessableEntity, "chunk_size_too_large", "upload: chunk size exceeds the maximum")

	// errSessionNotFound: no session with that id.
	errSessionNotFound = Errors.New(http.StatusNotFound, "session_not_found", "upload: no such session")
	// errNotOwner: the session or file belongs to someone else.
	errNotOwner = Errors.New(http.StatusForbidden, "forbidden", "upload: not yours")
	// errSessionNotOpen: the session no longer takes chunks (completed,
	// committed or failed).
	errSessionNotOpen = Errors.New(http.StatusConflict, "session_not_open", "upload: session is not open")
	// errSessionGone: the session was aborted or expired.
	errSessionGone = Errors.New(http.StatusGone, "session_gone", "upload: session aborted or expired")

	// errChunkOutOfRange: the chunk index is outside 0..chunk_count-1.
	errChunkOutOfRange = Errors.New(http.StatusUnprocessableEntity, "chunk_out_of_range", "upload: chunk index out of range")
	// errChunkTooLarge: the chunk body is longer than its slot.
	errChunkTooLarge = Errors.New(http.StatusRequestEntityTooLarge, "chunk_too_large", "upload: chunk larger than its declared size")
	// errChunkSize: the chunk body is shorter than its slot.
	errChunkSize = Errors.New(http.StatusUnprocessableEntity, "chunk_size_mismatch", "upload: chunk shorter than its declared size")
	// errChunkConflict: the chunk is stored with different bytes.
	errChunkConflict = Errors.New(http.StatusConflict, "chunk_conflict", "upload: chunk already stored with different bytes")
	// errChunkInProgress: another request is writing this chunk right now.
	errChunkInProgress = Errors.New(http.StatusConflict, "chunk_in_progress", "upload: chunk is being written by another request; retry")
	// errChunkChecksum: the chunk does not match the checksum sent with it.
	errChunkChecksum = Errors.New(http.StatusUnprocessableEntity, "chunk_checksum_mismatch", "upload: chunk does not match its checksum")
	// errChecksumHeader: the checksum header is malformed or names another algorithm.
	errChecksumHeader = Errors.New(http.StatusBadRequest, "invalid_checksum_header", "upload: malformed checksum header")

	// errMissingChunks: complete was called before every chunk was stored.
	errMissingChunks = Errors.New(http.StatusConflict, "missing_chunks", "upload: chunks missing")
	// errSHA256Mismatch: the bytes do not hash to the declared SHA-256 (UP-F5).
	errSHA256Mismatch = Errors.New(http.StatusUnprocessableEntity, "sha256_mismatch", "upload: SHA-256 of the bytes differs from the declared one")
	// errSizeMismatch: the bytes are not the declared size (UP-F5).
	errSizeMismatch = Errors.New(http.StatusUnprocessableEntity, "size_mismatch", "upload: size of the bytes differs from the declared one")

	// errNotCompleted: commit before a successful complete.
	errNotCompleted = Errors.New(http.StatusConflict, "not_completed", "upload: session not completed")
	// errAlreadyCommitted: the session was committed under another name.
	errAlreadyCommitted = Errors.New(http.StatusConflict, "already_committed", "upload: session already committed with other metadata")
	// errUploadExpired: the completed bytes were reclaimed before the commit.
	errUploadExpired = Errors.New(http.StatusGone, "upload_expired", "upload: the uploaded bytes were reclaimed; upload again")
	// errInvalidName and errInvalidMetadata: the commit's metadata is unacceptable.
	errInvalidName     = Errors.New(http.StatusUnprocessableEntity, "invalid_name", "upload: invalid name")
	errInvalidMetadata = Errors.New(http.StatusUnprocessableEntity, "invalid_metadata", "upload: invalid metadata")

	// errFileNotFound: no file with that id.
	errFileNotFound = Errors.New(http.StatusNotFound, "file_not_found", "upload: no such file")
	// errNotReady: the file is not published yet (UP-F4).
	errNotReady = Errors.New(http.StatusConflict, "not_ready", "upload: file is not published yet")
	// errAlreadyPublished: a processing run found the file published.
	errAlreadyPublished = errors.New("upload: file already published")
)

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
