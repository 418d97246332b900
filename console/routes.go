package console

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// routes is the console's route table. The book's pages (the chapter
// list, a chapter, a run) read signed out too; operator pages and
// starting a run need a session with role admin; every POST carries the
// session's CSRF token and must come from this origin.
func (c *Console) routes(e *echo.Echo) {
	c.api = e
	e.GET("/console/static/*", echo.WrapHandler(http.StripPrefix("/console/static/", http.FileServer(http.FS(static())))))
	e.GET("/favicon.ico", c.favicon)
	e.GET("/console/signin", c.signinForm)
	e.POST("/console/signin", c.signin)

	read, in, admin, csrf := c.reader, c.signedIn, c.admin, c.csrf
	e.POST("/console/signout", c.signout, in, csrf)

	// Reader pages: no token needed to read the book.
	e.GET("/", c.index, read)
	e.GET("/console", c.index, read)
	e.GET("/console/chapters/:slug", c.chapter, read)
	e.GET("/console/runs/:n", c.runPage, read)
	e.POST("/console/check", c.checkNow, in, csrf)

	// The lab: runs start a whole deployable on a scratch database.
	e.POST("/console/experiments/run", c.startRun, in, admin, csrf)
	// Stepping sessions: one schedule chosen by hand, step by step.
	e.POST("/console/stepping", c.startStepping, in, admin, csrf)
	e.GET("/console/stepping/:id", c.steppingPage, in, admin)
	e.POST("/console/stepping/:id/step", c.stepStepping, in, admin, csrf)
	e.POST("/console/stepping/:id/end", c.endStepping, in, admin, csrf)

	// Operator pages.
	e.GET("/console/queue", c.queue, in, admin)
	e.GET("/console/jobs/:id", c.job, in, admin)
	e.GET("/console/inbox", c.inbox, in, admin)
	e.POST("/console/inbox/jobs/:id", c.decideJob, in, admin, csrf)
	e.POST("/console/inbox/notify/:task", c.resolveTask, in, admin, csrf)
	e.POST("/console/inbox/orders/reconcile", c.reconcileOrders, in, admin, csrf)
	e.GET("/console/outbox", c.outboxPage, in, admin)
	e.GET("/console/admission", c.admission, in, admin)
}

// AdminPages are the console's admin-only GET pages (tests walk them).
var AdminPages = []string{"/console/queue", "/console/jobs/1", "/console/inbox", "/console/outbox", "/console/admission", "/console/stepping/1"}

// AdminActions are the console's admin-only POST actions.
var AdminActions = []string{"/console/experiments/run", "/console/inbox/jobs/1", "/console/inbox/notify/1", "/console/inbox/orders/reconcile",
	"/console/stepping", "/console/stepping/1/step", "/console/stepping/1/end"}
