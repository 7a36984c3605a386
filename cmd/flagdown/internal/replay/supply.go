package replay

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// A supply drop takes drivers off the platform for real in the middle of the window, to see how
// matching follows a fall in supply: at DriversDropAt × the window (simulated) every driver beyond
// the first DriversDropTo of a seeded order ends his shift. An idle driver, or one driving to a
// pickup (he abandons the ride, as a driver going offline does), sends one last ping with status
// offline at once; one carrying a passenger completes that ride first. They send nothing after it.

// validateSupplyDrop reports a supply drop out of its range (DriversDropTo 0 means none).
func (o *Options) validateSupplyDrop() error {
	switch {
	case o.DriversDropTo == 0:
		return nil
	case o.DriversDropTo < 0 || o.DriversDropTo >= o.Drivers:
		return errors.New("drivers-drop-to must be within 1..drivers−1 (0: no supply drop)")
	case !(o.DriversDropAt > 0 && o.DriversDropAt < 1):
		return errors.New("drivers-drop-at must be within 0..1, both excluded (a fraction of the window)")
	}
	return nil
}

// SupplyDropDrivers returns which of n drivers (indexes) the supply drop takes offline so that
// keep remain: a seeded permutation's last n − keep, so the drivers who stay are spread over the
// start positions. Empty when keep ≤ 0 or keep ≥ n.
func SupplyDropDrivers(n, keep int, seed uint64) []int {
	if keep <= 0 || keep >= n {
		return nil
	}
	perm := rand.New(rand.NewPCG(seed, 0x5d0b)).Perm(n)
	return perm[keep:]
}

// scheduleSupplyDrop schedules the supply drop of the options (none when DriversDropTo is 0) at
// DriversDropAt × window after the window opened (simulated).
func (s *sim) scheduleSupplyDrop(window time.Duration) {
	idx := SupplyDropDrivers(len(s.drivers), s.opts.DriversDropTo, s.opts.Seed)
	if len(idx) == 0 {
		return
	}
	at := time.Duration(s.opts.DriversDropAt * float64(window))
	s.schedule(at, func() {
		for _, i := range idx {
			d := s.drivers[i]
			d.signsOff = true
			s.dropOffline(d)
		}
	})
}

// signOff counts d's drop as the supply drop's and sends his last ping, status offline, from where
// he is.
func (s *sim) signOff(d *driver) {
	s.supplyDropped++
	p := d.position(s.now())
	ping := Ping{DriverID: d.id, Lat: p.Lat, Lng: p.Lng, TS: time.Now().UTC().Format(time.RFC3339Nano), Status: "offline"}
	s.pingsSent.Add(1)
	s.submit(func(ctx context.Context) {
		_, err := s.c.locationUpdate(ctx, []Ping{ping}, s.opts.BatchSize > 1)
		s.pingRequests.Add(1)
		if err != nil {
			s.post(func() { s.noteErr("location-update", err) })
		}
	})
}
