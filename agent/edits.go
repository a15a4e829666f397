package agent

import "sync"

// Edits collects the workspace paths that tools changed and reported
// themselves, with a diff (apply_patch), during one run. A tool that finds
// changes by comparing listings of the workspace (the shell's) takes them
// before it compares, so a file is not reported twice. The runner gives
// each run one (SandboxEnv.Edits). Safe for concurrent use; a nil *Edits
// records nothing.
type Edits struct {
	mu    sync.Mutex // guards paths
	paths []string
}

// Add records paths (relative to the workspace root, as file_changed
// events name them).
func (e *Edits) Add(paths ...string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.paths = append(e.paths, paths...)
}

// Take returns the paths recorded since the last Take and forgets them.
func (e *Edits) Take() []string {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.paths
	e.paths = nil
	return p
}
