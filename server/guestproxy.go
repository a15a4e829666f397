package server

// guestRoutes: the sandbox daemon's own API through the server. (Being written.)
func (s *Server) guestRoutes() {}
