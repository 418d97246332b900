package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

const (
	// sessionCookie carries the bearer token the person pasted. HttpOnly:
	// no script reads it; SameSite=Strict: no other site's request carries
	// it; Secure whenever the console is served over TLS.
	sessionCookie = "fencelab_console"
	// preCookie is the sign-in form's double-submit token (there is no
	// session to bind a CSRF token to yet).
	preCookie = "fencelab_console_pre"
	// MaxTokenLen bounds a pasted token (ours are ~200 bytes).
	MaxTokenLen  = 4096
	principalKey = "console.principal"
	tokenKey     = "console.token"
)

// session is the signed-in person as the pages see them.
type session struct {
	Principal httpx.Principal
	CSRF      string
}

func (s *session) Admin() bool { return s != nil && s.Principal.Role == httpx.RoleAdmin }

func sessionOf(c echo.Context) *session {
	s, _ := c.Get(principalKey).(*session)
	return s
}

// tokenOf is the session's bearer token (for actions through the API).
func tokenOf(c echo.Context) string {
	t, _ := c.Get(tokenKey).(string)
	return t
}

// csrfFor is the session's CSRF token: a MAC of the session token, so it
// needs no storage, differs per session and cannot be computed by a page
// that cannot read the HttpOnly cookie.
func (c *Console) csrfFor(token string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte(token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signedIn verifies the session cookie on every request: a missing,
// forged or expired token sends a page view to the sign-in form and
// refuses an action with 401.
func (c *Console) signedIn(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		ck, err := ec.Cookie(sessionCookie)
		msg := ""
		if err == nil && ck.Value != "" {
			p, verr := c.d.Auth.Verify(ck.Value)
			if verr == nil {
				ec.Set(principalKey, &session{Principal: p, CSRF: c.csrfFor(ck.Value)})
				ec.Set(tokenKey, ck.Value)
				return next(ec)
			}
			msg = "Your session ended: the token is no longer valid. Sign in again."
			if errors.Is(verr, jwt.ErrTokenExpired) {
				msg = "Your session ended: the token expired. Sign in again."
			}
			clearCookie(ec, sessionCookie)
		}
		if ec.Request().Method != http.MethodGet && ec.Request().Method != http.MethodHead {
			return c.fail(ec, http.StatusUnauthorized, "Sign in first", "This action needs a signed-in session.")
		}
		q := url.Values{"next": {ec.Request().URL.RequestURI()}}
		if msg != "" {
			q.Set("msg", msg)
		}
		return ec.Redirect(http.StatusSeeOther, "/console/signin?"+q.Encode())
	}
}

// admin refuses every role but admin with 403, as the API does.
func (c *Console) admin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if !sessionOf(ec).Admin() {
			return c.fail(ec, http.StatusForbidden, "Admins only",
				"This page and its actions need a token with role admin; yours has role "+string(sessionOf(ec).Principal.Role)+".")
		}
		return next(ec)
	}
}

// csrf guards every state-changing form: the browser must say the request
// comes from this origin (Sec-Fetch-Site, Origin), and the form must carry
// the session's CSRF token. Either alone would do against today's
// browsers; both cost nothing.
func (c *Console) csrf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if err := sameOrigin(ec.Request()); err != "" {
			return c.fail(ec, http.StatusForbidden, "Cross-site request refused", err)
		}
		want := sessionOf(ec).CSRF
		got := ec.FormValue("csrf")
		if want == "" || !hmac.Equal([]byte(got), []byte(want)) {
			return c.fail(ec, http.StatusForbidden, "Cross-site request refused",
				"The form did not carry this session's CSRF token. Reload the page and try again.")
		}
		return next(ec)
	}
}

// sameOrigin returns why r is not a same-origin request ("" when it is).
// A browser sends Sec-Fetch-Site on every request; old ones send Origin
// on cross-site POSTs. A client that sends neither (curl) is judged by the
// CSRF token alone.
func sameOrigin(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return "The browser reports this request as " + s + "; console forms only accept same-origin requests."
	}
	if o := r.Header.Get("Origin"); o != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if o != scheme+"://"+r.Host {
			return "The request comes from " + o + ", not from this console."
		}
	}
	return ""
}

func (c *Console) signinForm(ec echo.Context) error {
	pre := rand.Text()
	setCookie(ec, preCookie, pre)
	return c.render(ec, http.StatusOK, "signin.html", map[string]any{
		"Pre": pre, "Next": safeNext(ec.QueryParam("next")), "Msg": ec.QueryParam("msg"),
	})
}

// signin turns a pasted token into a session cookie.
func (c *Console) signin(ec echo.Context) error {
	if err := sameOrigin(ec.Request()); err != "" {
		return c.fail(ec, http.StatusForbidden, "Cross-site request refused", err)
	}
	next := safeNext(ec.FormValue("next"))
	ck, err := ec.Cookie(preCookie)
	if err != nil || ck.Value == "" || !hmac.Equal([]byte(ck.Value), []byte(ec.FormValue("pre"))) {
		return c.fail(ec, http.StatusForbidden, "Cross-site request refused",
			"The sign-in form was not the one this console served. Reload it and try again.")
	}
	again := func(msg string) error {
		pre := rand.Text()
		setCookie(ec, preCookie, pre)
		return c.render(ec, http.StatusUnauthorized, "signin.html", map[string]any{"Pre": pre, "Next": next, "Error": msg})
	}
	tok := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(ec.FormValue("token")), "Bearer "))
	switch {
	case tok == "":
		return again("Paste a token: `fencelab dev` prints them, `fencelab token` mints one.")
	case len(tok) > MaxTokenLen:
		return again("That is not a token: it is longer than any token this server mints.")
	}
	if _, err := c.d.Auth.Verify(tok); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return again("Token refused: it has expired. Mint a new one with `fencelab token`.")
		}
		return again("Token refused: it was not signed by this server (or is malformed).")
	}
	clearCookie(ec, preCookie)
	setCookie(ec, sessionCookie, tok)
	return ec.Redirect(http.StatusSeeOther, next)
}

func (c *Console) signout(ec echo.Context) error {
	clearCookie(ec, sessionCookie)
	return ec.Redirect(http.StatusSeeOther, "/console/signin?msg="+url.QueryEscape("Signed out."))
}

func setCookie(ec echo.Context, name, value string) {
	ec.SetCookie(&http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: ec.Request().TLS != nil})
}

func clearCookie(ec echo.Context, name string) {
	ec.SetCookie(&http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: ec.Request().TLS != nil})
}

// safeNext keeps a post-sign-in redirect on this site.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.HasPrefix(next, "/console/signin") {
		return "/"
	}
	return next
}
