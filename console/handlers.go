package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
	"github.com/fencelab/fencelab/services/notify"
)

// Bounds of what one page shows: a page's cost is its page, never the
// history behind it.
const (
	MaxReason      = 500 // a decision's reason (notify's own limit applies through its API)
	inboxRows      = 50  // per inbox section
	attentionRows  = 20  // per waiting state on the queue page
	jobEventsShown = 200 // a job page's history
	stepsShown     = 300 // a run's step table
)

// pageWait bounds how long the page view that starts the very first
// invariant check waits for it.
const pageWait = 3 * time.Second

// invView is one invariant's live status as the pages show it.
type invView struct {
	ID, Module, Statement, SQL, Error string
	Holds, Checked                    bool
	Schema                            bool // a schema invariant: a guard in the catalog, never data
	Columns                           []string
	Rows                              [][]string
	More                              bool
}

type chapterView struct {
	lab.Chapter
	Invariants  []invView
	Experiments []lab.Experiment
	Cluster     []clusterExperiment // experiments that need a whole cluster
	Red         int
}

// DataInvariants are the chapter's invariants that report rows of data.
func (cv chapterView) DataInvariants() []invView { return cv.invariants(false) }

// SchemaInvariants are the chapter's schema invariants: each reports a
// guard missing from the catalog, a different fact from a row that
// breaks a rule, so the chapter page shows them apart.
func (cv chapterView) SchemaInvariants() []invView { return cv.invariants(true) }

func (cv chapterView) invariants(schema bool) []invView {
	var out []invView
	for _, v := range cv.Invariants {
		if v.Schema == schema {
			out = append(out, v)
		}
	}
	return out
}

// chapters groups the registered invariants and the lab's experiments by
// chapter, in lab.Chapters order, with the last check's outcome; the
// foundation's CORE-… invariants come last under slug "".
func (c *Console) chapters(res *checkResult) []chapterView {
	byID := map[string]invariant.Result{}
	if res != nil {
		for _, r := range res.Results {
			byID[r.ID] = r
		}
	}
	all := append(append([]lab.Chapter(nil), lab.Chapters...), lab.Chapter{N: 0, Slug: "", Title: "Foundation (no chapter)"})
	out := make([]chapterView, 0, len(all))
	for _, ch := range all {
		cv := chapterView{Chapter: ch, Cluster: clusterExperiments[ch.Slug]}
		for _, inv := range c.o.Invariants.All() {
			if chapterOf(inv) != ch.Slug {
				continue
			}
			v := invView{ID: inv.ID, Module: inv.Module, Statement: inv.Statement, SQL: strings.TrimSpace(inv.SQL), Schema: inv.Schema}
			if inv.SQL == "" {
				v.SQL = "(checked in Go: it also looks outside the database)"
			}
			if r, ok := byID[inv.ID]; ok {
				v.Checked, v.Holds, v.Columns, v.More = true, r.Holds(), r.Columns, r.More
				if r.Err != nil {
					v.Error = r.Err.Error()
				}
				for _, row := range r.Rows {
					cells := make([]string, len(row))
					for i, x := range row {
						cells[i] = fmt.Sprint(x)
					}
					v.Rows = append(v.Rows, cells)
				}
			}
			if v.Checked && !v.Holds {
				cv.Red++
			}
			cv.Invariants = append(cv.Invariants, v)
		}
		for _, e := range c.o.Experiments {
			if slug, _, _ := strings.Cut(e.ID, "/"); slug == ch.Slug && ch.Slug != "" {
				cv.Experiments = append(cv.Experiments, e)
			}
		}
		if ch.Slug == "" && len(cv.Invariants) == 0 {
			continue
		}
		out = append(out, cv)
	}
	return out
}

func (c *Console) index(ec echo.Context) error {
	res := c.checks.Current(ec.Request().Context(), pageWait)
	chs := c.chapters(res)
	red := 0
	for _, ch := range chs {
		red += ch.Red
	}
	return c.render(ec, http.StatusOK, "index.html", map[string]any{"Chapters": chs, "Check": res, "Red": red})
}

func (c *Console) chapter(ec echo.Context) error {
	slug := ec.Param("slug")
	if slug == "foundation" {
		slug = ""
	} else if _, ok := lab.ChapterOf(slug); !ok {
		return c.fail(ec, http.StatusNotFound, "No such chapter", "There is no chapter "+strconv.Quote(slug)+".")
	}
	res := c.checks.Current(ec.Request().Context(), pageWait)
	var cv chapterView
	for _, ch := range c.chapters(res) {
		if ch.Slug == slug {
			cv = ch
		}
	}
	if cv.Title == "" {
		cv.Chapter, _ = lab.ChapterOf(slug)
	}
	runs := map[string][]*run{}
	exps := map[string]lab.Experiment{}
	ids := map[string]bool{}
	for _, e := range cv.Experiments {
		runs[e.ID] = c.runs.Recent(e.ID, 5)
		exps[e.ID] = e
		ids[e.ID] = true
	}
	invs := map[string]invView{}
	for _, v := range cv.Invariants {
		invs[v.ID] = v
	}
	var book *bookText
	if slug != "" {
		t, err := chapterText(slug, ids)
		if err != nil {
			return err
		}
		book = t
	}
	s := sessionOf(ec)
	csrf := ""
	if s != nil {
		csrf = s.CSRF
	}
	return c.render(ec, http.StatusOK, "chapter.html", map[string]any{
		"C": cv, "Check": res, "Runs": runs, "LabEnabled": c.runs.Enabled(), "Red": cv.Red,
		"Book": book, "Exps": exps, "Invs": invs, "Admin": s.Admin(), "SignedIn": s != nil, "CSRF": csrf,
		"Cluster": clusterExperiments[slug], "ExpCount": len(cv.Experiments) + len(clusterExperiments[slug]),
	})
}

func (c *Console) checkNow(ec echo.Context) error {
	ctx, cancel := context.WithTimeout(ec.Request().Context(), nowWait)
	defer cancel()
	c.checks.Now(ctx)
	return ec.Redirect(http.StatusSeeOther, safeNext(ec.FormValue("back")))
}

func (c *Console) startRun(ec echo.Context) error {
	id := ec.FormValue("experiment")
	e, ok := lab.Find(c.o.Experiments, id)
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "No such experiment", "There is no experiment "+strconv.Quote(trunc(id, 100))+"; the chapter pages list them.")
	}
	ru, err := c.runs.Start(e, sessionOf(ec).Principal.Subject)
	if errors.Is(err, errBusy) {
		return c.fail(ec, http.StatusServiceUnavailable, "The lab is busy",
			fmt.Sprintf("%d run(s) are running or waiting, the most this console allows. Try again when one ends.", c.runs.Capacity()))
	}
	if err != nil {
		return c.fail(ec, http.StatusServiceUnavailable, "The lab is not available here", err.Error())
	}
	return ec.Redirect(http.StatusSeeOther, fmt.Sprintf("/console/runs/%d", ru.N))
}

// runView is one version of a run as the run page draws it.
type runView struct {
	Title string
	R     *lab.Result
	Steps []string
	More  int
	Red   []redView // data invariants that reported rows (or failed to check)
	// SchemaRed are schema invariants that reported a guard missing: in a
	// naive run or its control, the naive schema the version sets up on
	// purpose. They never catch a run, so they are shown apart from Red.
	SchemaRed []redView
	Refused   int
	Violate   int
}

// Verdict is the run's verdict as a reader's sentence: the word
// (holds, caught, broke, not caught) and what it means for this version.
func (v *runView) Verdict() string {
	r := v.R
	ids := func() string {
		var s []string
		for _, rv := range v.Red {
			for _, c := range r.Catches {
				if rv.ID == c && rv.Error == "" {
					s = append(s, rv.ID)
				}
			}
		}
		return strings.Join(s, ", ")
	}
	switch r.Verdict {
	case lab.Held:
		if r.Control {
			return "Holds: every data invariant reports no rows. The same naive code, without the race or the fault, does not break it: the interleaving does."
		}
		return "Holds: the prediction held and every invariant reports no rows."
	case lab.Caught:
		return "Caught: " + ids() + " reports the data rows the naive timeline wrote, as the chapter says it would."
	case lab.NotCaught:
		return "Not caught: no invariant among " + strings.Join(r.Catches, ", ") + " reported this naive run, so the experiment is broken."
	case lab.Broke:
		if r.Control {
			return "Broke: the control broke an invariant or an assertion, so the naive version's catch does not depend on the race and the experiment is broken."
		}
		return "Broke: an invariant or an assertion failed, so the guarantee did not hold."
	}
	return string(r.Verdict)
}

// VerdictClass is the verdict's look: green when the version did what
// the book says it does, red when the experiment or the guarantee failed.
func (v *runView) VerdictClass() string {
	switch v.R.Verdict {
	case lab.Held:
		return "holds"
	case lab.Caught:
		return "caught"
	}
	return "missed"
}

func viewOf(title string, r *lab.Result) *runView {
	if r == nil {
		return nil
	}
	v := &runView{Title: title, R: r}
	for i, s := range r.Timeline {
		switch s.Outcome {
		case lab.Refused:
			v.Refused++
		case lab.Violates:
			v.Violate++
		}
		if i < stepsShown {
			v.Steps = append(v.Steps, lab.FormatStep(s, r.Started))
		}
	}
	v.More = max(0, len(r.Timeline)-stepsShown)
	for _, iv := range r.Invariants {
		if !iv.Holds {
			rv := redView{InvariantView: iv}
			for _, row := range iv.Rows {
				cells := make([]string, len(row))
				for i, x := range row {
					cells[i] = fmt.Sprint(x)
					if x == nil {
						cells[i] = "—"
					}
				}
				if iv.Schema || schemaFact(cells) {
					rv.Schema = append(rv.Schema, cells)
				} else {
					rv.Data = append(rv.Data, cells)
				}
			}
			if iv.Schema && iv.Error == "" {
				v.SchemaRed = append(v.SchemaRed, rv)
			} else {
				v.Red = append(v.Red, rv)
			}
		}
	}
	return v
}

// redView is an invariant that reported rows in a run, its rows split
// into the data that breaks it and facts about the schema (a constraint
// or trigger the naive version runs without): they answer different
// questions and are shown apart.
type redView struct {
	lab.InvariantView
	Data, Schema [][]string
}

// schemaFact reports whether an invariant's row states a fact about the
// schema rather than naming data: the invariants word those rows "…
// constraint missing …", "… trigger missing or not always enabled".
func schemaFact(cells []string) bool {
	if len(cells) == 0 {
		return false
	}
	p := strings.ToLower(cells[0])
	return strings.Contains(p, "missing") && (strings.Contains(p, "constraint") || strings.Contains(p, "trigger") ||
		strings.Contains(p, "index") || strings.Contains(p, "check"))
}

func (c *Console) runPage(ec echo.Context) error {
	n, err := strconv.ParseInt(ec.Param("n"), 10, 64)
	ru := (*run)(nil)
	if err == nil {
		ru = c.runs.Get(n)
	}
	if ru == nil {
		return c.fail(ec, http.StatusNotFound, "No such run", "This console keeps its last "+strconv.Itoa(keptRuns)+" runs in memory; start a new one from the chapter's page.")
	}
	return c.render(ec, http.StatusOK, "run.html", runPageData(ru))
}

// runPageData is what the run page shows of ru: each version's verdict,
// timeline and invariants, the control beside the naive run when the
// experiment declares one.
func runPageData(ru *run) map[string]any {
	state, g, nv, ctl, rerr := ru.snapshot()
	slug, _, _ := strings.Cut(ru.Exp.ID, "/")
	ch, _ := lab.ChapterOf(slug)
	return map[string]any{
		"Run": ru, "State": state, "Err": rerr, "Chapter": ch, "Refresh": state != "done",
		"Guarded": viewOf("Guarded", g), "Naive": viewOf("Naive: "+ru.Exp.Naive, nv),
		"Control": viewOf("Control: "+ru.Exp.Control, ctl), "HasControl": ru.Exp.Naive != "" && ru.Exp.Control != "",
		"GuardedSVG": svgOf(g), "NaiveSVG": svgOf(nv), "ControlSVG": svgOf(ctl), "Elapsed": time.Since(ru.Queued).Round(time.Second),
	}
}

func svgOf(r *lab.Result) any {
	if r == nil {
		return nil
	}
	return swimlane(r)
}

// --- operator pages ---

type depthRow struct {
	Kind        string
	States      map[claim.State]int64
	OldestReady time.Duration
}

var queueStates = []claim.State{claim.StateReady, claim.StateRunning, claim.StateUnknown, claim.StateNeedsReview}

func (c *Console) queue(ec echo.Context) error {
	ctx := ec.Request().Context()
	q, err := c.d.Jobs.Queue(ctx)
	if err != nil {
		return err
	}
	rows := map[string]*depthRow{}
	for _, d := range q.Depth {
		r := rows[d.Kind]
		if r == nil {
			r = &depthRow{Kind: d.Kind, States: map[claim.State]int64{}}
			rows[d.Kind] = r
		}
		r.States[d.State] += d.Jobs
	}
	for k, age := range q.OldestReady {
		if rows[k] == nil {
			rows[k] = &depthRow{Kind: k, States: map[claim.State]int64{}}
		}
		rows[k].OldestReady = age.Round(time.Millisecond)
	}
	var table []*depthRow
	for _, r := range rows {
		table = append(table, r)
	}
	sort.Slice(table, func(i, j int) bool { return table[i].Kind < table[j].Kind })
	review, err := c.d.Jobs.ListWaiting(ctx, claim.StateNeedsReview, 0, attentionRows)
	if err != nil {
		return err
	}
	unknown, err := c.d.Jobs.ListWaiting(ctx, claim.StateUnknown, 0, attentionRows)
	if err != nil {
		return err
	}
	ss := c.samples.all()
	var times []time.Time
	var ready, running, waiting []float64
	for _, s := range ss {
		times = append(times, s.At)
		ready, running, waiting = append(ready, float64(s.Ready)), append(running, float64(s.Running)), append(waiting, float64(s.Waiting))
	}
	return c.render(ec, http.StatusOK, "queue.html", map[string]any{
		"Table": table, "States": queueStates, "Review": review, "Unknown": unknown,
		"Throughput": throughput(ss, time.Minute),
		"Chart": chart("Claim jobs over the last minutes: ready, running, waiting for a person", times,
			series{"ready", "s1", ready}, series{"running", "s2", running}, series{"waiting for a person (unknown + needs_review)", waitingClass(waiting), waiting}),
	})
}

// waitingClass colours the jobs waiting for a person red only while some
// are: a chart is not an alarm when nothing is wrong.
func waitingClass(waiting []float64) string {
	if len(waiting) > 0 && waiting[len(waiting)-1] > 0 {
		return "trouble"
	}
	return "s3"
}

// throughput is the attempts this process finished per second over the
// last window of samples (nil before two samples).
func throughput(ss []sample, window time.Duration) *float64 {
	if len(ss) < 2 {
		return nil
	}
	last := ss[len(ss)-1]
	first := ss[0]
	for _, s := range ss {
		if last.At.Sub(s.At) <= window {
			first = s
			break
		}
	}
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return nil
	}
	v := max(0, last.Finished-first.Finished) / dt
	return &v
}

func (c *Console) job(ec echo.Context) error {
	raw := ec.Param("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return c.fail(ec, http.StatusBadRequest, "Not a job id", "A job id is a positive integer.")
	}
	j, events, err := c.d.Jobs.Get(ec.Request().Context(), id, jobEventsShown+1)
	if errors.Is(err, claim.ErrNotFound) {
		return c.fail(ec, http.StatusNotFound, "No such job", fmt.Sprintf("There is no job %d (finished jobs are removed after their retention).", id))
	}
	if err != nil {
		return err
	}
	more := len(events) > jobEventsShown
	if more {
		events = events[:jobEventsShown]
	}
	var claims []claim.Event
	for _, e := range events {
		if e.Event == "claimed" {
			claims = append(claims, e)
		}
	}
	return c.render(ec, http.StatusOK, "job.html", map[string]any{
		"Job": j, "Events": events, "More": more, "Claims": claims,
		"Payload": pretty(j.Payload), "Result": pretty(j.Result),
		"Review": j.State == claim.StateNeedsReview && !isNotifyKind(j.Kind), "Decisions": jobDecisions,
	})
}

func pretty(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return trunc(b.String(), 4000)
}

// isNotifyKind: a notify delivery job is decided through notify's review
// (it records the decision beside the task), never as a bare claim job.
func isNotifyKind(kind string) bool { return strings.HasPrefix(kind, "notify.") }

var jobDecisions = []claim.Decision{claim.DecideSucceeded, claim.DecideRetry, claim.DecideFailed}

func (c *Console) inbox(ec echo.Context) error {
	ctx := ec.Request().Context()
	all, err := c.d.Jobs.ListWaiting(ctx, claim.StateNeedsReview, 0, inboxRows)
	if err != nil {
		return err
	}
	var jobs []*claim.Job
	for _, j := range all {
		if !isNotifyKind(j.Kind) {
			jobs = append(jobs, j)
		}
	}
	var page notify.ReviewPage
	status, body := c.callAPI(ec, http.MethodGet, fmt.Sprintf("/notify/review?limit=%d", inboxRows), nil)
	notifyErr := ""
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &page); err != nil {
			notifyErr = "notify's review queue answered something unreadable: " + err.Error()
		}
	} else {
		notifyErr = problemText(status, body)
	}
	orders, err := order.Stuck(ctx, c.d.Pool, c.reconcileAfter, inboxRows)
	if err != nil {
		return err
	}
	return c.render(ec, http.StatusOK, "inbox.html", map[string]any{
		"Jobs": jobs, "JobsMore": len(all) == inboxRows, "Tasks": page.Items, "TasksMore": page.Next != "", "NotifyErr": notifyErr,
		"Orders": orders, "ReconcileAfter": c.reconcileAfter, "Decisions": jobDecisions,
		"Actions": []string{notify.ActionDelivered, notify.ActionResend, notify.ActionGiveUp},
		"Done":    ec.QueryParam("done"), "Error": ec.QueryParam("error"), "MaxReason": MaxReason,
	})
}

// reason reads and checks the required reason of a decision.
func reason(ec echo.Context) (string, bool) {
	r := strings.TrimSpace(ec.FormValue("reason"))
	n := len([]rune(r))
	return r, n >= 1 && n <= MaxReason
}

func backToInbox(ec echo.Context, done, failed string) error {
	q := url.Values{}
	if done != "" {
		q.Set("done", done)
	}
	if failed != "" {
		q.Set("error", failed)
	}
	return ec.Redirect(http.StatusSeeOther, "/console/inbox?"+q.Encode())
}

// decideJob applies a person's verdict to a claim job in needs_review with
// claim.Client.DecideTx, the function notify's own review calls: the
// event records the person (owner "review:<subject>") and the reason.
func (c *Console) decideJob(ec echo.Context) error {
	id, err := strconv.ParseInt(ec.Param("id"), 10, 64)
	if err != nil || id < 1 {
		return c.fail(ec, http.StatusBadRequest, "Not a job id", "A job id is a positive integer.")
	}
	d := claim.Decision(ec.FormValue("decision"))
	why, ok := reason(ec)
	switch {
	case d != claim.DecideSucceeded && d != claim.DecideRetry && d != claim.DecideFailed:
		return c.fail(ec, http.StatusBadRequest, "Choose a decision", "A decision is succeeded, retry or failed.")
	case !ok:
		return c.fail(ec, http.StatusBadRequest, "A reason is required", fmt.Sprintf("Say why, in 1 to %d characters: it is recorded with your name.", MaxReason))
	}
	ctx := ec.Request().Context()
	j, _, err := c.d.Jobs.Get(ctx, id, 0)
	if errors.Is(err, claim.ErrNotFound) {
		return c.fail(ec, http.StatusNotFound, "No such job", fmt.Sprintf("There is no job %d.", id))
	}
	if err != nil {
		return err
	}
	if isNotifyKind(j.Kind) {
		return c.fail(ec, http.StatusConflict, "Decide this one as a notification",
			"Job "+strconv.FormatInt(id, 10)+" delivers a notification: decide it in the inbox's notification section, which records the decision with the task.")
	}
	who := sessionOf(ec).Principal.Subject
	tx, err := c.d.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	after, err := c.d.Jobs.DecideTx(ctx, tx, id, d, who, fmt.Sprintf("review %s by %s: %s", d, who, why), nil)
	if errors.Is(err, claim.ErrNotInReview) {
		return backToInbox(ec, "", fmt.Sprintf("Job %d is no longer waiting for review: someone decided first.", id))
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	c.log.Info("console: job decided", "job", id, "decision", d, "by", who, "reason", why)
	return backToInbox(ec, fmt.Sprintf("Job %d decided %s by %s; it is now %s.", id, d, who, after.State), "")
}

// resolveTask decides a notification task in review through notify's own
// API handler (POST /notify/review/{task}/resolve), with the person's
// token: the decision is recorded with who and why exactly as through the
// API, because it is the API.
func (c *Console) resolveTask(ec echo.Context) error {
	task := ec.Param("task")
	if n, err := strconv.ParseInt(task, 10, 64); err != nil || n < 1 {
		return c.fail(ec, http.StatusBadRequest, "Not a task id", "A task id is a positive integer.")
	}
	why, ok := reason(ec)
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "A reason is required", fmt.Sprintf("Say why, in 1 to %d characters: it is recorded with your name.", MaxReason))
	}
	body, _ := json.Marshal(notify.ResolveRequest{Action: ec.FormValue("action"), Reason: why})
	status, resp := c.callAPI(ec, http.MethodPost, "/notify/review/"+task+"/resolve", body)
	if status != http.StatusOK {
		return backToInbox(ec, "", "Task "+task+": "+problemText(status, resp))
	}
	var t notify.Task
	_ = json.Unmarshal(resp, &t)
	return backToInbox(ec, fmt.Sprintf("Task %s resolved (%s) by %s; it is now %s.", task, ec.FormValue("action"), sessionOf(ec).Principal.Subject, t.State), "")
}

// reconcileOrders runs the orders' reconciliation now through its API
// (POST /flashsale/admin/reconcile): the channel's answer decides each
// waiting order (ORD-O2), never a person's guess. The API records no
// person; the console logs who asked and why.
func (c *Console) reconcileOrders(ec echo.Context) error {
	why, ok := reason(ec)
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "A reason is required", fmt.Sprintf("Say why, in 1 to %d characters.", MaxReason))
	}
	status, resp := c.callAPI(ec, http.MethodPost, "/flashsale/admin/reconcile", nil)
	if status != http.StatusOK {
		return backToInbox(ec, "", "Reconcile: "+problemText(status, resp))
	}
	var res order.ReconcileResult
	_ = json.Unmarshal(resp, &res)
	who := sessionOf(ec).Principal.Subject
	c.log.Info("console: orders reconciled", "by", who, "reason", why, "checked", res.Checked, "outcomes", res.Outcomes)
	return backToInbox(ec, fmt.Sprintf("Reconciliation asked the channel about %d order(s): %v.", res.Checked, res.Outcomes), "")
}

// callAPI serves one request through the deployable's own routes with the
// session's token, in-process.
func (c *Console) callAPI(ec echo.Context, method, path string, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(ec.Request().Context(), method, path, bytes.NewReader(body))
	if err != nil {
		return http.StatusInternalServerError, []byte(err.Error())
	}
	tok, err := c.apiToken(ec)
	if err != nil {
		return http.StatusInternalServerError, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	c.api.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// problemText renders an API error answer for a person.
func problemText(status int, body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	if json.Unmarshal(body, &p) == nil && (p.Detail != "" || p.Title != "") {
		return fmt.Sprintf("%s (%d %s)", strings.TrimSpace(p.Title+": "+p.Detail), status, p.Code)
	}
	return fmt.Sprintf("the API answered %d: %s", status, trunc(string(body), 200))
}

func (c *Console) outboxPage(ec echo.Context) error {
	ss, err := outbox.Statuses(ec.Request().Context(), c.d.Pool)
	if err != nil {
		return err
	}
	samples := c.samples.all()
	var times []time.Time
	var lagE, lagS []float64
	for _, s := range samples {
		times = append(times, s.At)
		lagE, lagS = append(lagE, float64(s.LagEvents)), append(lagS, s.LagSeconds)
	}
	return c.render(ec, http.StatusOK, "outbox.html", map[string]any{
		"Consumers": ss, "Now": time.Now(),
		"ChartEvents":  chart("Largest consumer lag, in events", times, series{"events behind", "s1", lagE}),
		"ChartSeconds": chart("Largest consumer lag, in seconds", times, series{"seconds behind", "s1", lagS}),
	})
}

// gauge is one admission limiter as its metrics show it, with its
// configured limit and wait line (0: not known to the console).
type gauge struct {
	Limiter                  string
	InUse, Waiting, Rejected float64
	Limit, WaitLine          int
	MaxWait                  time.Duration
	Guards                   string // what it admits, in a reader's words
}

// admission reads the limiters' gauges from this process's metrics: the
// limiters are in-process, so these are this replica's. Gathering the
// registry also runs every collector (some query the database), so the
// page reads a snapshot at most gaugeTTL old.
func (c *Console) admission(ec echo.Context) error {
	list, err := c.gauges.get(c.gatherGauges)
	if err != nil {
		return err
	}
	// The limits: the write limiter's from the process's own settings,
	// the reservations' from flashsale's admission API (the same numbers
	// GET /flashsale/admin/admission answers).
	hs, _ := app.LoadHTTPSettings(c.d.Config)
	var fs struct {
		Limit    int `json:"limit"`
		WaitLine int `json:"wait_line"`
	}
	if status, body := c.callAPI(ec, http.MethodGet, "/flashsale/admin/admission", nil); status == http.StatusOK {
		_ = json.Unmarshal(body, &fs)
	}
	out := make([]gauge, 0, len(list))
	for _, g := range list {
		v := *g
		switch v.Limiter {
		case "write":
			v.Limit, v.WaitLine, v.MaxWait = hs.AdmissionLimit, hs.AdmissionWaitLine, hs.AdmissionMaxWait
			v.Guards = "every write request of the API (POST, PUT, PATCH, DELETE)"
		case reserve.LimiterName:
			v.Limit, v.WaitLine = fs.Limit, fs.WaitLine
			v.Guards = "flash-sale reservations' work in the database"
		}
		out = append(out, v)
	}
	return c.render(ec, http.StatusOK, "admission.html", map[string]any{"Gauges": out})
}

func (c *Console) gatherGauges() ([]*gauge, error) {
	gs := map[string]*gauge{}
	if c.d.Metrics != nil {
		mfs, err := c.d.Metrics.Gather()
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				name := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "limiter" {
						name = l.GetValue()
					}
				}
				if name == "" {
					continue
				}
				g := gs[name]
				if g == nil {
					g = &gauge{Limiter: name}
				}
				switch mf.GetName() {
				case "fencelab_admission_in_use":
					g.InUse = m.GetGauge().GetValue()
				case "fencelab_admission_waiting":
					g.Waiting = m.GetGauge().GetValue()
				case "fencelab_admission_rejected_total":
					g.Rejected = m.GetCounter().GetValue()
				default:
					continue
				}
				gs[name] = g
			}
		}
	}
	var list []*gauge
	for _, g := range gs {
		list = append(list, g)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Limiter < list[j].Limiter })
	return list, nil
}

// gaugeTTL bounds how old the admission page's snapshot may be.
const gaugeTTL = 2 * time.Second

type gaugeCache struct {
	mu   sync.Mutex
	at   time.Time
	list []*gauge
}

func (g *gaugeCache) get(gather func() ([]*gauge, error)) ([]*gauge, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) < gaugeTTL {
		return g.list, nil
	}
	list, err := gather()
	if err != nil {
		return nil, err
	}
	g.at, g.list = time.Now(), list
	return list, nil
}
