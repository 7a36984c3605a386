package deploycheck_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/internal/deploycheck"
)

// TestDeadLetterSinkIsInternal: the Knative Service every Trigger dead-letters to
// (flagdown-dead-letters, deploy/knative/broker.yaml) has no route from the ingress
// (networking.knative.dev/visibility: cluster-local) and runs flagdown's own sink (flagdown
// dead-letters, which logs what identifies an event and never its data), not event_display, which
// logs whole events with their riders' ids and positions.
func TestDeadLetterSinkIsInternal(t *testing.T) {
	r := load(t)
	m, ok := r.byKind(r.knative, "Service")["flagdown-dead-letters"]
	if !ok {
		t.Fatal("deploy/knative: no Service flagdown-dead-letters")
	}
	if v := deploycheck.Str(m.Object, "metadata", "labels", "networking.knative.dev/visibility"); v != "cluster-local" {
		t.Errorf("%s flagdown-dead-letters: visibility %q, want cluster-local", m.File, v)
	}
	cs := podContainers(m)
	if len(cs) != 1 {
		t.Fatalf("%s flagdown-dead-letters: %d containers, want 1", m.File, len(cs))
	}
	image := deploycheck.Str(cs[0], "image")
	args := fmt.Sprint(deploycheck.List(cs[0], "args"))
	if !strings.HasPrefix(image, "ghcr.io/flagdown/flagdown-") || args != "[dead-letters]" {
		t.Errorf("%s flagdown-dead-letters: image %s args %s, want a flagdown image running dead-letters", m.File, image, args)
	}
}
