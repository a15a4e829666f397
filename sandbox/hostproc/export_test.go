package hostproc

// DaemonPID is the pid of sandbox id's daemon, for the external tests;
// 0 if it is not running.
func (r *Runtime) DaemonPID(id string) int {
	st, err := r.load(id)
	if err != nil {
		return 0
	}
	return st.PID
}
