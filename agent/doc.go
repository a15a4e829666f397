// Package agent is Cove's control plane: agents, the Runner that drives the
// model/tool loop, the events a run streams, approvals and the RunState a
// paused run is resumed from. It sees sandboxes only through the sandbox
// contract (package sandbox) and models only through the Model interface;
// providers live in agent/model/..., tools in agent/tool/....
package agent
