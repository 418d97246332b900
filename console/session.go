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
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

const (
	// sessionCookie carries the session's random id (never the token the
	// person pasted: that is checked once, at sign-in). HttpOnly: no
	// script reads it; SameSite=Strict: no other site's request carries
	// it; Secure whenever the console is served over TLS.
	sessionCookie = "fencelab_console"
	// preCookie is the sign-in form's double-submit token (there is no
	// session to bind a CSRF token to yet).
	preCookie = "fencelab_console_pre"
	// MaxTokenLen bounds a pasted token (ours are ~200 bytes).
	MaxTokenLen  = 4096
	principalKey = "console.principal"
	// apiTokenTTL is the life of the token an action through the API
	// carries: minted for the session's person for that one call.
	apiTokenTTL = time.Minute
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

// apiToken mints a short-lived bearer token for the session's person, for
// one action through the API: the session keeps no token, and the API
// records the same subject and role the session was opened with.
func (c *Console) apiToken(ec echo.Context) (string, error) {
	s := sessionOf(ec)
	if s == nil {
		return "", errors.New("console: no session")
	}
	return c.d.Auth.Mint(s.Principal.Subject, s.Principal.Role, apiTokenTTL)
}

// csrfFor is the session's CSRF token: a MAC of the session id, so it
// needs no storage, differs per session and cannot be computed by a page
// that cannot read the HttpOnly cookie.
func (c *Console) csrfFor(id string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// resume looks the session cookie up on every request. It reports
// whether the request may go on: with no cookie it goes on signed out; a
// cookie whose session was signed out or has expired sends a page view to
// the sign-in form (an old cookie never opens anything) and refuses an
// action with 401.
func (c *Console) resume(ec echo.Context) (bool, error) {
	ck, err := ec.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return true, nil
	}
	p, err := c.sessions.get(ec.Request().Context(), ck.Value)
	if err == nil {
		ec.Set(principalKey, &session{Principal: p, CSRF: c.csrfFor(ck.Value)})
		return true, nil
	}
	if !errors.Is(err, errNoSession) {
		return false, err
	}
	clearCookie(ec, sessionCookie)
	return false, c.toSignIn(ec, "Your session ended (signed out, or it expired). Sign in again.")
}

func (c *Console) toSignIn(ec echo.Context, msg string) error {
	if ec.Request().Method != http.MethodGet && ec.Request().Method != http.MethodHead {
		return c.fail(ec, http.StatusUnauthorized, "Sign in first", "This action needs a signed-in session.")
	}
	q := url.Values{"next": {ec.Request().URL.RequestURI()}}
	if msg != "" {
		q.Set("msg", msg)
	}
	return ec.Redirect(http.StatusSeeOther, "/console/signin?"+q.Encode())
}

// reader lets a page be read signed out (the book needs no token) and
// shows it signed in when the cookie names a live session.
func (c *Console) reader(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if ok, err := c.resume(ec); !ok {
			return err
		}
		return next(ec)
	}
}

// signedIn needs a live session: anything else goes to the sign-in form
// (an action: 401).
func (c *Console) signedIn(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if ok, err := c.resume(ec); !ok {
			return err
		}
		if sessionOf(ec) == nil {
			return c.toSignIn(ec, "")
		}
		return next(ec)
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
	p, err := c.d.Auth.Verify(tok)
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return again("Token refused: it has expired. Mint a new one with `fencelab token`.")
		}
		return again("Token refused: it was not signed by this server (or is malformed).")
	}
	// The token is verified, so its expiry can be read as is: the session
	// never outlives the token that opened it.
	var rc jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &rc); err != nil || rc.ExpiresAt == nil {
		return again("Token refused: it carries no expiry.")
	}
	id, err := c.sessions.create(ec.Request().Context(), p, rc.ExpiresAt.Time)
	if err != nil {
		return err
	}
	clearCookie(ec, preCookie)
	setCookie(ec, sessionCookie, id)
	return ec.Redirect(http.StatusSeeOther, next)
}

// signout deletes the session on the server, so the cookie is dead
// wherever a copy of it went, and clears it in this browser.
func (c *Console) signout(ec echo.Context) error {
	if ck, err := ec.Cookie(sessionCookie); err == nil && ck.Value != "" {
		if err := c.sessions.delete(ec.Request().Context(), ck.Value); err != nil {
			return err
		}
	}
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
