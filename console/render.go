package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/claim"
)

type pageTemplate struct{ t *template.Template }

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return time.Since(t).Round(100*time.Millisecond).String() + " ago"
	},
	"ms":    func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) },
	"dur":   func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"join":  strings.Join,
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"tptr": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("15:04:05.000")
	},
	"sptr": func(s *string) string {
		if s == nil {
			return "—"
		}
		return *s
	},
	"f1": func(p *float64) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.1f", *p)
	},
	"num": func(f float64) string { return short(f) },
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m
	},
	"depth":     func(m map[claim.State]int64, s claim.State) int64 { return m[s] },
	"noNaive":   noNaiveOf,
	"noControl": func() string { return noControl },
	"runWhat":   runWhat,
	"anchor":    anchor,
	"legend":    legend,
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*pageTemplate, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*pageTemplate{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", base, err)
		}
		out[base] = &pageTemplate{t: t}
	}
	return out, nil
}

// render writes page with data and the session. Pages are never cached
// (they show live state and carry a CSRF token) and are never framed.
func (c *Console) render(ec echo.Context, status int, page string, data map[string]any) error {
	p, ok := c.pages[page]
	if !ok {
		return fmt.Errorf("console: no page %s", page)
	}
	if data == nil {
		data = map[string]any{}
	}
	data["S"] = sessionOf(ec)
	if running, since := c.checks.Running(); running {
		data["Checking"] = since
	}
	data["Path"] = ec.Request().URL.Path
	var b bytes.Buffer
	if err := p.t.Execute(&b, data); err != nil {
		return fmt.Errorf("console: render %s: %w", page, err)
	}
	h := ec.Response().Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	return ec.HTMLBlob(status, b.Bytes())
}

// fail renders an error page with status.
func (c *Console) fail(ec echo.Context, status int, title, detail string) error {
	return c.render(ec, status, "error.html", map[string]any{"Title": title, "Detail": detail, "Status": status, "StatusText": http.StatusText(status)})
}

// favicon answers /favicon.ico, which every browser asks for, with the
// small embedded icon (a 404 there fills logs and devtools with noise).
func (c *Console) favicon(ec echo.Context) error {
	b, err := fs.ReadFile(static(), "favicon.ico")
	if err != nil {
		return err
	}
	ec.Response().Header().Set("Cache-Control", "public, max-age=86400")
	return ec.Blob(http.StatusOK, "image/x-icon", b)
}
