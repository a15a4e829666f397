package server

// usageRoutes: GET /v1/usage. (Being written.)
func (s *Server) usageRoutes() {}
