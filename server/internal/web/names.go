package web

// The names of the credentials the front doors accept, which the proxy
// keeps out of every request that reaches a sandbox.
const (
	// SessionCookie is the web UI's session; CSRFHeader carries its CSRF
	// token.
	SessionCookie = "cove_session"
	CSRFHeader    = "X-Cove-CSRF"
	// PortTokenHeader and PortTokenQuery carry a private port's token;
	// PortCookie keeps it in a browser after the first request.
	PortTokenHeader = "X-Cove-Port-Token"
	PortTokenQuery  = "cove_token"
	PortCookie      = "cove_port_token"
	// E2BTrafficTokenHeader carries the traffic access token of an E2B
	// sandbox's ports.
	E2BTrafficTokenHeader = "E2b-Traffic-Access-Token"
)
