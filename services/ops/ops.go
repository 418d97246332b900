// Package ops is the core libraries as modules of the deployable: what
// core/lease, core/claim, core/idem and core/outbox bring to a process
// (invariants, admin views over HTTP, retention purges, metrics). The
// libraries stay library-shaped — no echo in claim, no app in idem or
// outbox — and are wired here, beside the other modules.
package ops
