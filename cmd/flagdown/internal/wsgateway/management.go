package wsgateway

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/push"
)

// ManagementHandler serves the management API at /{stage}/@connections/{connectionId} with the
// real API's wire format:
//
//   - POST, body = the message (at most MaxMessageBytes, else 413 PayloadTooLargeException) →
//     200 with an empty body once the message was written to the socket as one text message;
//   - GET → 200, {"connectedAt", "identity": {"sourceIp", "userAgent"}, "lastActiveAt"} (ISO 8601);
//   - DELETE → 204; the socket is closed with 1000 and the disconnect integration follows.
//
// An unknown or closed connection id answers 410 GoneException. Every request must be signed with
// SigV4 (service execute-api, Options.Region, Options.AccessKeyID); refusals are 403 as AWS's
// front door answers them: MissingAuthenticationTokenException (no Authorization header),
// IncompleteSignatureException (a required part of it missing), AccessDeniedException ("The
// security token included in the request is invalid.": another access key id),
// InvalidSignatureException (a signature that does not match the request, its headers and its
// body's SHA-256, a wrong scope, or an X-Amz-Date more than SignatureWindow from this clock:
// "Signature expired" / "Signature not yet current"). A path or method the API does not have is
// 403 MissingAuthenticationTokenException too, as API Gateway answers for unknown resources. Errors
// carry their type in x-amzn-ErrorType and a JSON body {"message": "..."}.
func (g *Gateway) ManagementHandler() http.Handler { return http.HandlerFunc(g.serveManagement) }

func (g *Gateway) serveManagement(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Amzn-Requestid", requestID())
	body, err := readUpTo(http.MaxBytesReader(w, r.Body, int64(g.opts.MaxMessageBytes)+1), g.opts.MaxMessageBytes+1)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "BadRequestException", "could not read the request body")
		return
	}
	if len(body) > g.opts.MaxMessageBytes {
		writeJSONError(w, http.StatusRequestEntityTooLarge, push.ErrPayloadTooLarge,
			fmt.Sprintf("Message too long. Max allowed size is %d bytes.", g.opts.MaxMessageBytes))
		return
	}
	if e := g.sig.verify(r, body, time.Now()); e != nil {
		writeJSONError(w, http.StatusForbidden, e.typ, e.msg)
		return
	}
	prefix := "/" + g.opts.Stage + "/@connections/"
	path := r.URL.EscapedPath()
	escaped, ok := strings.CutPrefix(path, prefix)
	id, err := url.PathUnescape(escaped)
	if !ok || escaped == "" || strings.Contains(escaped, "/") || err != nil {
		writeJSONError(w, http.StatusForbidden, push.ErrMissingAuthenticationToken, "Missing Authentication Token")
		return
	}
	c := g.lookup(id)
	switch r.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	default:
		writeJSONError(w, http.StatusForbidden, push.ErrMissingAuthenticationToken, "Missing Authentication Token")
		return
	}
	if c != nil {
		<-c.ready // at most the end of the library's upgrade
		if c.ws == nil {
			c = nil
		}
	}
	if c == nil {
		writeJSONError(w, http.StatusGone, push.ErrGone, "connection "+id+" is gone")
		return
	}
	switch r.Method {
	case http.MethodPost:
		if err := c.post(body); err != nil {
			g.opts.Log.Warn("post to connection failed", "connection_id", id, "err", err)
			writeJSONError(w, http.StatusGone, push.ErrGone, "connection "+id+" is gone")
			return
		}
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		w.Header().Set("Content-Type", jsonContentType)
		_ = json.NewEncoder(w).Encode(connectionJSON{
			ConnectedAt:  isoTime(c.connectedAt),
			Identity:     push.Identity{SourceIP: c.sourceIP, UserAgent: c.userAgent},
			LastActiveAt: isoTime(time.Unix(0, c.lastActive.Load())),
		})
	case http.MethodDelete:
		go c.shutdown(ReasonDeleted, statusNormal, "connection deleted")
		w.WriteHeader(http.StatusNoContent)
	}
}

// connectionJSON is push.Connection as the API writes it (timestamps with milliseconds, UTC).
type connectionJSON struct {
	ConnectedAt  string        `json:"connectedAt"`
	Identity     push.Identity `json:"identity"`
	LastActiveAt string        `json:"lastActiveAt"`
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// writeJSONError answers status with {"message": msg} and, when typ is set, x-amzn-ErrorType.
func writeJSONError(w http.ResponseWriter, status int, typ, msg string) {
	if typ != "" {
		w.Header().Set(push.HeaderErrorType, typ)
	}
	w.Header().Set("Content-Type", jsonContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// requestID is a random id for x-amzn-RequestId, as the API stamps every answer.
func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// readUpTo reads r to its end, or to limit bytes.
func readUpTo(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)))
	if err != nil {
		if _, tooBig := err.(*http.MaxBytesError); tooBig {
			return b, nil
		}
	}
	return b, err
}

// bytesReader is an io.Reader for b, nil (no body) when b is empty.
func bytesReader(b []byte) io.Reader {
	if len(b) == 0 {
		return nil
	}
	return bytes.NewReader(b)
}
