package pgstore

import (
	"context"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// RidesToMatch returns, in the order of ids, the rides among ids that are REQUESTED without a
// PENDING offer whose window is open (the rides a batch window can still offer; read without locks,
// lifecycle.Service.Match re-checks each under its lock), and for each of them the drivers it was
// ever offered to (excluded from its candidates). Ids that are no ride are left out.
func RidesToMatch(ctx context.Context, q Querier, ids []string) ([]*dispatch.Ride, map[string]map[string]bool, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	rows, err := q.Query(ctx, `SELECT `+rideCols+` FROM rides r WHERE r.id::text = ANY($1) AND r.status = 'REQUESTED'
		AND NOT EXISTS (SELECT 1 FROM offers o WHERE o.ride_id = r.id AND o.status = 'PENDING' AND o.expires_at > now())`, ids)
	if err != nil {
		return nil, nil, pgErr(err)
	}
	byID := map[string]*dispatch.Ride{}
	for rows.Next() {
		r, err := scanRide(rows)
		if err != nil {
			rows.Close()
			return nil, nil, pgErr(err)
		}
		byID[r.ID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, pgErr(err)
	}
	offered := map[string]map[string]bool{}
	out := make([]*dispatch.Ride, 0, len(byID))
	keep := make([]string, 0, len(byID))
	for _, id := range ids {
		if r, ok := byID[id]; ok {
			out = append(out, r)
			keep = append(keep, r.ID)
			offered[r.ID] = map[string]bool{}
			delete(byID, id) // an id listed twice counts once
		}
	}
	if len(keep) == 0 {
		return nil, offered, nil
	}
	orows, err := q.Query(ctx, `SELECT ride_id::text, driver_id FROM offers WHERE ride_id::text = ANY($1)`, keep)
	if err != nil {
		return nil, nil, pgErr(err)
	}
	defer orows.Close()
	for orows.Next() {
		var ride, driver string
		if err := orows.Scan(&ride, &driver); err != nil {
			return nil, nil, pgErr(err)
		}
		offered[ride][driver] = true
	}
	return out, offered, pgErr(orows.Err())
}
