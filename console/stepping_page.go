package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/lab"
)

// runnerStepper starts sessions on the runner's scratch environment (the
// lab's own cluster, never the live database), under the runner's
// context: stopping the process ends them.
func runnerStepper(r *Runner) startStepper {
	return func(_ context.Context, e lab.Experiment, v lab.Variant) (stepper, lab.SessionView, error) {
		if !r.Enabled() {
			return nil, lab.SessionView{}, errors.New("this process has no lab environment")
		}
		env, err := r.environment()
		if err != nil {
			return nil, lab.SessionView{}, fmt.Errorf("could not provision the lab's scratch PostgreSQL: %w", err)
		}
		s, view, err := lab.StartSession(r.ctx, e, env, v)
		if err != nil {
			return nil, lab.SessionView{}, err
		}
		return s, view, nil
	}
}

// steppingPath is a session's page.
func steppingPath(id string) string { return "/console/stepping/" + id }

func (c *Console) startStepping(ec echo.Context) error {
	id := ec.FormValue("experiment")
	e, ok := lab.Find(c.o.Experiments, id)
	if !ok || e.Explore == nil {
		return c.fail(ec, http.StatusBadRequest, "Nothing to step",
			"There is no explorable experiment "+strconv.Quote(trunc(id, 100))+"; the chapter pages offer \"Step it by hand\" for those that declare actors.")
	}
	v, err := parseVariant(e, ec.FormValue("variant"))
	if err != nil {
		return c.fail(ec, http.StatusBadRequest, "No such version", err.Error()+".")
	}
	if !c.runs.Enabled() {
		return c.fail(ec, http.StatusServiceUnavailable, "The lab is not available here",
			"This process has no lab environment: step it from a shell with `fencelab lab explore "+e.ID+"`.")
	}
	st, err := c.stepping.Open(ec.Request().Context(), e, v, sessionOf(ec).Principal.Subject)
	switch {
	case errors.Is(err, errSteppingMine):
		return c.render(ec, http.StatusConflict, "error.html", map[string]any{
			"Title": "You have a stepping session already", "Status": http.StatusConflict, "StatusText": http.StatusText(http.StatusConflict),
			"Detail": "One stepping session per admin: each holds a scratch database. End it (or let it end after " +
				steppingIdle.String() + " without a step) to start another.",
			"Link": steppingPath(st.ID), "LinkText": "Your session: " + st.Exp.ID + " (" + st.Variant.String() + ")"})
	case errors.Is(err, errSteppingFull):
		return c.fail(ec, http.StatusTooManyRequests, "Every stepping session is in use",
			fmt.Sprintf("This console runs at most %d stepping sessions at once (each holds a scratch database); one ends when its reader ends it or after %s without a step. Try again then.", c.stepping.max, steppingIdle))
	case err != nil:
		return c.fail(ec, http.StatusServiceUnavailable, "The session did not start", err.Error())
	}
	c.log.Info("console: stepping session", "id", e.ID, "variant", v.String(), "by", st.Owner)
	return ec.Redirect(http.StatusSeeOther, steppingPath(st.ID))
}

// steppingOf is the request's session, or the 404 page's error.
func (c *Console) steppingOf(ec echo.Context) (*stepping, error) {
	st := c.stepping.Get(ec.Param("id"), sessionOf(ec).Principal.Subject)
	if st == nil {
		return nil, c.fail(ec, http.StatusNotFound, "No such stepping session",
			"This stepping session has ended (by its reader, after "+steppingIdle.String()+" without a step, or when the console restarted), or it is not yours. Start a new one from the chapter's page.")
	}
	return st, nil
}

func (c *Console) steppingPage(ec echo.Context) error {
	st, err := c.steppingOf(ec)
	if st == nil {
		return err
	}
	return c.render(ec, http.StatusOK, "stepping.html", steppingPageData(st, ""))
}

func (c *Console) stepStepping(ec echo.Context) error {
	st, err := c.steppingOf(ec)
	if st == nil {
		return err
	}
	actor := ec.FormValue("actor")
	_, err = c.stepping.Step(st, actor)
	if err != nil && !errors.Is(err, lab.ErrSessionEnded) {
		// A stale page (a second click, another tab) chose an actor that
		// is no longer waiting: say so over the current state.
		return c.render(ec, http.StatusConflict, "stepping.html", steppingPageData(st, err.Error()))
	}
	return ec.Redirect(http.StatusSeeOther, steppingPath(st.ID)+"#actors")
}

func (c *Console) endStepping(ec echo.Context) error {
	st, err := c.steppingOf(ec)
	if st == nil {
		return err
	}
	c.stepping.End(st)
	slug, _, _ := strings.Cut(st.Exp.ID, "/")
	return ec.Redirect(http.StatusSeeOther, "/console/chapters/"+slug+"#"+anchor(st.Exp.ID))
}

// actorRow is one actor on the session's page.
type actorRow struct {
	Name    string
	State   string // waiting, blocked or finished
	Next    string // the step it would begin
	StepN   int    // 1-based
	Of      int
	WaitsOn string // a blocked actor: on whom (an actor's name, or PostgreSQL's application_name)
}

// steppingPageData is what the session's page shows: each actor with its
// next step (or on whom it waits), the timeline so far, the invariants
// now, and when done the verdict and the command that replays it.
func steppingPageData(st *stepping, problem string) map[string]any {
	view, ended := st.snapshot()
	slug, _, _ := strings.Cut(st.Exp.ID, "/")
	ch, _ := lab.ChapterOf(slug)
	actors := map[string]bool{}
	var rows []actorRow
	for _, a := range st.Exp.Explore.Actors {
		actors[a.Name] = true
		row := actorRow{Name: a.Name, State: "finished", Of: len(a.Steps)}
		for _, o := range view.Waiting {
			if o.Actor == a.Name {
				row.State, row.Next, row.StepN = "waiting", o.Label, o.Step+1
			}
		}
		if on, ok := view.Blocked[a.Name]; ok {
			row.State, row.WaitsOn = "blocked", on
		}
		rows = append(rows, row)
	}
	for i := range rows {
		if w := strings.TrimPrefix(rows[i].WaitsOn, "lab:"); actors[w] {
			rows[i].WaitsOn = w // the scheduler names actors by their application_name
		}
	}
	res := &lab.Result{Timeline: view.Timeline}
	if len(view.Timeline) > 0 {
		res.Started = view.Timeline[0].At
	}
	tl := viewOf("", res)
	var verdict *runView
	replay := ""
	if view.Done && view.Result != nil {
		verdict = viewOf("", view.Result)
		replay = "fencelab lab run " + st.Exp.ID + variantFlag(st.Variant) + " --schedule " + view.Result.Schedule
	}
	return map[string]any{
		"St": st, "View": view, "Ended": ended, "Chapter": ch, "Variant": st.Variant.String(),
		"Actors": rows, "Timeline": tl, "SVG": swimlane(res), "Invariants": view.Invariants,
		"Verdict": verdict, "Replay": replay, "Schedule": strings.Join(view.Schedule, ","), "Problem": problem,
		"Idle": steppingIdle, "Anchor": anchor(st.Exp.ID), "Started": st.Started.UTC().Format(time.RFC3339),
	}
}
