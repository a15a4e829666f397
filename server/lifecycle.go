package server

// lifecycleLoop enforces TTL, idle timeout and retention, and meters use.
// (Being written.)
func (s *Server) lifecycleLoop() { <-s.done }
