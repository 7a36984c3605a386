package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestNearbyAccess: riders get no driver ids and positions snapped to the centre of their ~300 m (dispatch.RiderCellM)
// cell (two drivers 20 m apart in one cell are indistinguishable, and a driver moving 20 m inside
// it does not move on the map); ops get ids and exact positions; drivers and callers without a
// token get 403 and 401.
func TestNearbyAccess(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	cell := dispatch.RiderCell(dispatch.Point{Lat: 40.7128, Lng: -74.0060})
	a, b := fntest.Offset(cell, -10, 0), fntest.Offset(cell, 10, 0)
	env.Ping(t, "d-a", a)
	env.Ping(t, "d-b", b)
	const q = "/?lat=40.7128&lng=-74.0060&radius_m=1000"

	status, body := fntest.Do(t, env.Nearby, http.MethodGet, q, nil, env.As(auth.RoleRider, "r-1"))
	if status != http.StatusOK {
		t.Fatalf("rider: %d %v", status, body)
	}
	drivers, _ := body["drivers"].([]any)
	if len(drivers) != 2 {
		t.Fatalf("rider sees %d drivers, want 2: %v", len(drivers), body)
	}
	for _, d := range drivers {
		m := d.(map[string]any)
		if _, ok := m["driver_id"]; ok {
			t.Errorf("rider sees a driver id: %v", m)
		}
		if m["lat"] != cell.Lat || m["lng"] != cell.Lng {
			t.Errorf("rider sees %v,%v, want the cell centre %v", m["lat"], m["lng"], cell)
		}
	}
	if got := dispatch.RiderCell(fntest.Offset(cell, 0, 200)); got == cell {
		t.Errorf("a point 200 m east is in the same cell %v", got)
	}

	status, body = fntest.Do(t, env.Nearby, http.MethodGet, q, nil, env.Ops())
	drivers, _ = body["drivers"].([]any)
	if status != http.StatusOK || len(drivers) != 2 || drivers[0].(map[string]any)["driver_id"] == nil {
		t.Fatalf("ops: %d %v, want 2 drivers with ids", status, body)
	}
	first := drivers[0].(map[string]any)
	if p := (dispatch.Point{Lat: first["lat"].(float64), Lng: first["lng"].(float64)}); !fntest.Near(p, a, 1e-5) && !fntest.Near(p, b, 1e-5) {
		t.Errorf("ops sees %v, want an exact position", p)
	}

	if status, _ := fntest.Do(t, env.Nearby, http.MethodGet, q, nil, env.As(auth.RoleDriver, "d-a")); status != http.StatusForbidden {
		t.Errorf("driver: %d, want 403", status)
	}
	if status, _ := fntest.Do(t, env.Nearby, http.MethodGet, q, nil, nil); status != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", status)
	}
}
