package httpx

import (
	"net"
	"net/http"
	"strings"
)

// ClientIP is the IP address of the client of r as the trusted proxies in front of the functions
// passed it: the entry trustedHops places from the right of the X-Forwarded-For list (each trusted
// proxy appends the address it received the request from, so entries left of it are the client's
// own claims and are ignored). It is "" when trustedHops is 0 (FLAGDOWN_TRUSTED_PROXY_HOPS: no
// proxy trusted, X-Forwarded-For ignored) or the list is shorter than trustedHops or its entry is
// not an IP address; per-IP budgets are then not applied.
func ClientIP(r *http.Request, trustedHops int) string {
	if trustedHops <= 0 {
		return ""
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, h := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	if len(hops) < trustedHops {
		return ""
	}
	ip := net.ParseIP(hops[len(hops)-trustedHops])
	if ip == nil {
		return ""
	}
	return ip.String()
}
