package server

// snapshotRoutes: workspace snapshots. (Being written.)
func (s *Server) snapshotRoutes() {}
