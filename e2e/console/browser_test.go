package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// One browser per package, one isolated browser context (its own cookie
// jar) and tab per test: tests run in parallel against apps that all live
// on 127.0.0.1, and cookies do not tell ports apart.
var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserStop   func()
	browserErr    error
	browserBinary string
)

func TestMain(m *testing.M) {
	e2etest.MainThen(m, func() {
		if browserStop != nil {
			browserStop()
		}
	})
}

// EnvChromium names the browser binary when it is not on PATH.
const EnvChromium = "FENCELAB_CHROMIUM"

func findBrowser() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found on PATH (looked for chromium, chromium-browser, google-chrome): " +
		"install it with `apt-get update && apt-get install -y chromium` (.ci/run does) or set " + EnvChromium)
}

func browser(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		browserBinary, browserErr = findBrowser()
		if browserErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "fencelab-chromium-")
		if err != nil {
			browserErr = err
			return
		}
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(browserBinary),
			chromedp.Flag("headless", true),
			chromedp.Flag("no-sandbox", true), // tests run as root in CI
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("no-first-run", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("window-size", "1280,900"),
			chromedp.UserDataDir(dir),
		}
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		browserCtx = ctx
		browserStop = func() { cancelCtx(); cancelAlloc(); _ = os.RemoveAll(dir) }
		// Start the browser now, with no timeout on this first call (a
		// timeout here would stop the whole browser later).
		if err := chromedp.Do(ctx); err != nil {
			browserErr = fmt.Errorf("start %s: %w", browserBinary, err)
		}
	})
	if browserErr != nil {
		t.Fatalf("console tests need a real browser: %v", browserErr)
	}
	return browserCtx
}

// tab is one test's browser tab on one app.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func newTab(t *testing.T, base string) *tab {
	t.Helper()
	return newTabWithin(t, base, 5*time.Minute)
}

// newTabWithin is newTab for a test that needs the tab longer than 5
// minutes (one that walks every page after a lab run).
func newTabWithin(t *testing.T, base string, d time.Duration) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser(t), chromedp.WithNewBrowserContext())
	ctx, cancelT := context.WithTimeout(ctx, d)
	tb := &tab{t: t, ctx: ctx, base: base}
	t.Cleanup(func() {
		if t.Failed() {
			tb.screenshot(failureShot(t))
		}
		cancelT()
		cancel()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return tb
}

// failureShot is where a failed test's screenshot goes: beside the test
// logs (FENCELAB_TEST_ARTIFACTS, else the system's temp directory).
func failureShot(t *testing.T) string {
	dir := os.Getenv("FENCELAB_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "fencelab-console-failures")
	}
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_")
	return filepath.Join(dir, name+".png")
}

func (b *tab) screenshot(path string) {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot: %v", err)
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		if err := os.WriteFile(path, png, 0o644); err == nil {
			b.t.Logf("screenshot saved: %s", path)
			return
		}
	}
	b.t.Logf("screenshot: cannot write %s", path)
}

func (b *tab) open(path string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(b.base+path)); err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *tab, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it is true (navigations in
// between are expected: a form post, a page refreshing itself).
func (b *tab) waitFor(js string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("(function(){try{return document.readyState === 'complete' && !!("+js+")}catch(e){return false}})()"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	b.t.Fatalf("waited %s for %s (last error: %v); page: %s", timeout, js, last, b.text("body"))
}

func (b *tab) text(sel string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent`, sel)))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

func (b *tab) fill(sel, value string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.SetValue(chromedp.CSS(sel), value)); err != nil {
		b.t.Fatalf("fill %s: %v", sel, err)
	}
}

func (b *tab) click(sel string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
}

// submit clicks sel, which navigates, and waits for js on the next page
// (the old document is marked, so its state cannot satisfy js).
func (b *tab) submit(sel, js string, timeout time.Duration) {
	b.t.Helper()
	_ = eval[bool](b, `(window.__fencelabOld = true)`)
	b.click(sel)
	b.waitFor(`!window.__fencelabOld && (`+js+`)`, timeout)
}

func (b *tab) path() string { return eval[string](b, "location.pathname") }

// cookies returns the browser's cookies for the app.
func (b *tab) cookies() map[string]*network.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base + "/"}})
	if err != nil {
		b.t.Fatalf("read cookies: %v", err)
	}
	out := map[string]*network.Cookie{}
	for _, c := range res.Cookies {
		out[c.Name] = c
	}
	return out
}

// signIn pastes token into the sign-in form and waits for the chapters.
func (b *tab) signIn(token string) {
	b.t.Helper()
	b.open("/console/signin")
	b.fill("#token", token)
	b.submit("#signin", `document.querySelector("#who") && location.pathname === "/"`, 30*time.Second)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func navigate(ctx context.Context, u string) error { return chromedp.Do(ctx, chromedp.Navigate(u)) }
