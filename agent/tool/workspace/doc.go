// Package workspace tells the agent about its sandbox workspace and gives
// it the tools that edit it: the sandbox part of the system prompt
// (Instructions: a base prompt, per-capability notes, the workspace tree,
// the AGENTS.md files in scope and the skills index), skill discovery
// (Skills) with the load_skill tool (LoadSkill), and the freeform
// apply_patch tool (ApplyPatch) applied through a sandbox.Session.
//
// It is the bridge between the harness (package agent) and the compute
// plane (package sandbox) for these concerns; it sees a sandbox only
// through sandbox.Session, so the same prompt and tools work on every
// runtime. Model-visible names and schemas follow the OpenAI Agents SDK's
// sandbox agents (apply_patch, load_skill {"skill_name"}) so prompts and
// habits carry over.
package workspace
