package httpx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
)

var errTeapot = errors.New("teapot")

var testErrors = httpx.NewErrors([]httpx.ErrorMapping{httpx.Map(errTeapot, http.StatusConflict, "teapot")})

func newServer(t *testing.T) (*httptest.Server, *httpx.Auth) {
	t.Helper()
	auth, err := httpx.NewAuth([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	e := httpx.New(httpx.Options{Errors: testErrors})
	type body struct {
		Amount int64  `json:"amount"`
		Reason string `json:"reason"`
	}
	e.POST("/echo", func(c echo.Context) error {
		var b body
		if err := httpx.Bind(c, &b); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, b)
	})
	e.GET("/admin", func(c echo.Context) error {
		return c.String(http.StatusOK, httpx.PrincipalOf(c).Subject)
	}, auth.Require(httpx.RoleAdmin))
	e.GET("/me", func(c echo.Context) error {
		return c.String(http.StatusOK, httpx.PrincipalOf(c).Subject)
	}, auth.Require())
	e.GET("/teapot", func(c echo.Context) error { return errTeapot })
	e.GET("/boom", func(c echo.Context) error { return errors.New("secret internal detail") })
	e.GET("/panic", func(c echo.Context) error { panic("boom") })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, auth
}

type problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

func do(t *testing.T, req *http.Request) (*http.Response, problem, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p problem
	if resp.Header.Get("Content-Type") == httpx.ProblemContentType {
		require.NoError(t, json.Unmarshal(b, &p), string(b))
		require.Equal(t, resp.StatusCode, p.Status)
	}
	return resp, p, string(b)
}

func get(t *testing.T, url, token string) (*http.Response, problem, string) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return do(t, req)
}

func TestAuthRejectsMissingForgedExpiredAndWrongRole(t *testing.T) {
	t.Parallel()
	srv, auth := newServer(t)

	admin, err := auth.Mint("admin-0001", httpx.RoleAdmin, time.Hour)
	require.NoError(t, err)
	user, err := auth.Mint("user-0042", httpx.RoleUser, time.Hour)
	require.NoError(t, err)
	other, _ := httpx.NewAuth([]byte("another-secret-of-enough-length"))
	forged, _ := other.Mint("admin-0001", httpx.RoleAdmin, time.Hour)
	// An expired token signed with the right key.
	expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iss": "fencelab", "sub": "admin-0001", "role": "admin",
		"exp": time.Now().Add(-time.Minute).Unix(),
	}).SignedString([]byte("0123456789abcdef0123456789abcdef"))
	// alg=none must never be accepted.
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{
		"iss": "fencelab", "sub": "admin-0001", "role": "admin", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(jwt.UnsafeAllowNoneSignatureType)

	for name, tc := range map[string]struct {
		token  string
		status int
		detail string
	}{
		"missing":    {"", 401, "missing bearer token"},
		"garbage":    {"not-a-token", 401, "invalid token"},
		"forged":     {forged, 401, "invalid token"},
		"alg none":   {none, 401, "invalid token"},
		"expired":    {expired, 401, "token expired"},
		"wrong role": {user, 403, ""},
	} {
		resp, p, _ := get(t, srv.URL+"/admin", tc.token)
		require.Equal(t, tc.status, resp.StatusCode, name)
		require.Equal(t, httpx.ProblemContentType, resp.Header.Get("Content-Type"), name)
		if tc.status == 401 {
			require.Equal(t, "unauthorized", p.Code, name)
			require.Equal(t, tc.detail, p.Detail, name)
			require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"), name)
		} else {
			require.Equal(t, "forbidden", p.Code, name)
		}
	}
	resp, _, body := get(t, srv.URL+"/admin", admin)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "admin-0001", body)
	resp, _, body = get(t, srv.URL+"/me", user)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "user-0042", body, "identity comes from the verified token")
}

func TestMintRefusesBadInput(t *testing.T) {
	t.Parallel()
	_, err := httpx.NewAuth([]byte("short"))
	require.Error(t, err)
	a, _ := httpx.NewAuth([]byte("0123456789abcdef"))
	_, err = a.Mint("", httpx.RoleUser, time.Hour)
	require.Error(t, err)
	_, err = a.Mint("user 42", httpx.RoleUser, time.Hour)
	require.Error(t, err)
	_, err = a.Mint("user-0042", "root", time.Hour)
	require.Error(t, err)
	_, err = a.Mint("user-0042", httpx.RoleUser, 0)
	require.Error(t, err)
}

func TestBadBodiesAreClientErrorsNeverServerErrors(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	post := func(ct, body string) (*http.Response, problem, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/echo", strings.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		return do(t, req)
	}
	cases := []struct {
		name, ct, body string
		status         int
		code           string
	}{
		{"malformed", "application/json", `{"amount":`, 400, "malformed_json"},
		{"syntax", "application/json", `{"amount" 1}`, 400, "malformed_json"},
		{"empty", "application/json", ``, 400, "empty_body"},
		{"unknown field", "application/json", `{"amount":1,"admin":true}`, 400, "unknown_field"},
		{"wrong type", "application/json", `{"amount":"30"}`, 400, "invalid_field"},
		{"fraction", "application/json", `{"amount":30.5}`, 400, "invalid_field"},
		{"overflow", "application/json", `{"amount":1e30}`, 400, "invalid_field"},
		{"array", "application/json", `[1,2]`, 400, "malformed_json"},
		{"two objects", "application/json", `{"amount":1}{"amount":2}`, 400, "malformed_json"},
		{"not json", "text/plain", `amount=1`, 415, "unsupported_media_type"},
		{"oversized", "application/json", `{"reason":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "body_too_large"},
	}
	for _, c := range cases {
		resp, p, raw := post(c.ct, c.body)
		require.Equal(t, c.status, resp.StatusCode, "%s: %s", c.name, raw)
		require.Equal(t, c.code, p.Code, c.name)
	}
	resp, _, body := post("application/json", `{"amount":30,"reason":"prize-17"}`)
	require.Equal(t, 200, resp.StatusCode)
	require.JSONEq(t, `{"amount":30,"reason":"prize-17"}`, body)
}

func TestErrorsMapToProblemsWithoutLeakingInternals(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	resp, p, _ := get(t, srv.URL+"/teapot", "")
	require.Equal(t, 409, resp.StatusCode)
	require.Equal(t, "teapot", p.Code)

	resp, p, body := get(t, srv.URL+"/boom", "")
	require.Equal(t, 500, resp.StatusCode)
	require.Equal(t, "internal", p.Code)
	require.NotContains(t, body, "secret internal detail")

	resp, p, _ = get(t, srv.URL+"/panic", "")
	require.Equal(t, 500, resp.StatusCode)
	require.Equal(t, "internal", p.Code)

	resp, p, _ = get(t, srv.URL+"/missing", "")
	require.Equal(t, 404, resp.StatusCode)
	require.Equal(t, "not_found", p.Code)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
}

// An ErrorTable's sentinels are answered as they were declared, wrapped or
// not, and the table lists them in declaration order (the order a module's
// Errors field hands to NewErrors).
func TestErrorTableAnswersEachSentinelAsDeclared(t *testing.T) {
	t.Parallel()
	var tbl httpx.ErrorTable
	errGone := tbl.New(http.StatusGone, "thing_gone", "pkg: thing gone")
	errTaken := tbl.New(http.StatusConflict, "thing_taken", "pkg: thing taken")
	require.Equal(t, []httpx.ErrorMapping{
		httpx.Map(errGone, http.StatusGone, "thing_gone"),
		httpx.Map(errTaken, http.StatusConflict, "thing_taken"),
	}, []httpx.ErrorMapping(tbl))
	require.Equal(t, "pkg: thing gone", errGone.Error())

	errs := httpx.NewErrors(tbl)
	p := errs.Problem(fmt.Errorf("%w: id 7", errTaken))
	require.Equal(t, http.StatusConflict, p.Status)
	require.Equal(t, "thing_taken", p.Code)
	require.Equal(t, "pkg: thing taken: id 7", p.Detail)
	require.Equal(t, "thing_gone", errs.Problem(errGone).Code)
}

// A database outage is the server's trouble and transient: 503 with
// Retry-After and no connection details, even for a raw driver error a
// module forgot to map.
func TestDatabaseOutageIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = pgx.Connect(context.Background(), "postgres://nobody@"+addr+"/none?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	p := testErrors.Problem(fmt.Errorf("points: debit: %w", err))
	require.Equal(t, 503, p.Status)
	require.Equal(t, "database_unavailable", p.Code)
	require.Equal(t, 1, p.RetryAfter)
	require.NotContains(t, p.Detail, "127.0.0.1")
}
