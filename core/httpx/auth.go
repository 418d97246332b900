package httpx

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
)

// Role is what a token may do. Users act only as their own subject;
// admin and service tokens run internal operations (grants, recompute, GC,
// release runs, event intake).
type Role string

const (
	RoleUser    Role = "user"
	RoleAdmin   Role = "admin"
	RoleService Role = "service"
)

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleUser, RoleAdmin, RoleService:
		return r, nil
	}
	return "", fmt.Errorf("httpx: unknown role %q (want user, admin or service)", s)
}

// Principal is the verified identity behind a request. Handlers take the
// acting user from here, never from a parameter.
type Principal struct {
	Subject string
	Role    Role
}

// Privileged reports an admin or service principal.
func (p Principal) Privileged() bool { return p.Role == RoleAdmin || p.Role == RoleService }

// CanActFor reports whether p may act on resources owned by owner.
func (p Principal) CanActFor(owner string) bool {
	return (p.Subject == owner && !Reserved(owner)) || p.Role == RoleAdmin
}

const issuer = "fencelab"

// subjectRE bounds subjects: they end up in keys, logs and URLs.
var subjectRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// ReservedSubject owns the system's own records (the points system
// accounts, say). No token is minted or accepted for it and no user
// resource may be created for it: only the system acts as itself.
const ReservedSubject = "fencelab"

// Reserved reports whether s is the reserved subject, in any case.
func Reserved(s string) bool { return strings.EqualFold(s, ReservedSubject) }

// ValidSubject reports whether s is an acceptable subject / user id.
func ValidSubject(s string) bool { return subjectRE.MatchString(s) }

type claims struct {
	Role Role `json:"role"`
	jwt.RegisteredClaims
}

// Auth signs and verifies bearer tokens: HS256 JWTs carrying subject, role
// and expiry.
type Auth struct {
	secret []byte
	now    func() time.Time
}

// MinSecretLen is the shortest accepted signing secret (bytes).
const MinSecretLen = 16

// NewAuth returns an Auth for secret.
func NewAuth(secret []byte) (*Auth, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("httpx: token secret must be at least %d bytes (set FENCELAB_TOKEN_SECRET)", MinSecretLen)
	}
	return &Auth{secret: secret, now: time.Now}, nil
}

// Mint signs a token for sub with role, valid for ttl.
func (a *Auth) Mint(sub string, role Role, ttl time.Duration) (string, error) {
	if !ValidSubject(sub) {
		return "", fmt.Errorf("httpx: invalid subject %q", sub)
	}
	if Reserved(sub) {
		return "", fmt.Errorf("httpx: subject %q is reserved for the system", sub)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", errors.New("httpx: token ttl must be positive")
	}
	now := a.now()
	c := claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: sub,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(a.secret)
}

// Verify checks signature (HS256 only), issuer and expiry.
func (a *Auth) Verify(token string) (Principal, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(issuer), jwt.WithExpirationRequired(), jwt.WithTimeFunc(a.now))
	if err != nil {
		return Principal{}, err
	}
	if !ValidSubject(c.Subject) || Reserved(c.Subject) {
		return Principal{}, errors.New("invalid subject")
	}
	if _, err := ParseRole(string(c.Role)); err != nil {
		return Principal{}, err
	}
	return Principal{Subject: c.Subject, Role: c.Role}, nil
}

const principalKey = "fencelab.principal"

// Require verifies the bearer token and, when roles are given, that the
// principal has one of them: 401 for a missing, forged or expired token,
// 403 for a valid token with the wrong role.
func (a *Auth) Require(roles ...Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get(echo.HeaderAuthorization)
			tok, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || tok == "" {
				return Unauthorized("missing bearer token")
			}
			p, err := a.Verify(strings.TrimSpace(tok))
			if err != nil {
				if errors.Is(err, jwt.ErrTokenExpired) {
					return Unauthorized("token expired")
				}
				return Unauthorized("invalid token")
			}
			if len(roles) > 0 && !slices.Contains(roles, p.Role) {
				return Forbidden("role %q may not call this route", p.Role)
			}
			c.Set(principalKey, p)
			return next(c)
		}
	}
}

// PrincipalOf returns the verified principal (zero value on unauthenticated
// routes).
func PrincipalOf(c echo.Context) Principal {
	p, _ := c.Get(principalKey).(Principal)
	return p
}

// RequireOwner returns 403 unless the principal is owner or an admin.
func RequireOwner(c echo.Context, owner string) error {
	if !PrincipalOf(c).CanActFor(owner) {
		return Forbidden("not yours")
	}
	return nil
}
