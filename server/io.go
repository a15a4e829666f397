package server

// ioRoutes: exec streams, processes, files, tar. (Being written.)
func (s *Server) ioRoutes() {}
