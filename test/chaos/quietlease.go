package chaos

import (
	"strings"
	"time"
)

// VLeaseLostQuiet: a term that began while no fault was active ended
// because its lease ran out before another fault began. Nothing kept the
// coordination service from answering the daemon's renewals, so the daemon
// did not renew in time: the defect behind flaps like a first renewal
// scheduled after the deadline of a lease that etcd granted late (after an
// outage), which cost a node its term a second after its promotion.
const VLeaseLostQuiet = "lease_lost_quiet"

// checkQuietLeaseLoss judges every term elected while no fault was active
// and fails those that ended by a lease expiry (the elector's
// "leadership_ended" with a lease-expired reason) while still none was.
func checkQuietLeaseLoss(h History, r *Report, add func(string, time.Time, string, ...any)) {
	active := map[string]bool{}          // fault ids injected and not healed
	elected := map[nodeEpoch]time.Time{} // terms elected with none active, while none began
	for _, e := range h {
		switch e.Kind {
		case KindFault:
			switch e.Get("phase") {
			case "inject":
				active[e.Get("id")] = true
				clear(elected) // a fault during a term excuses its end
			case "heal":
				delete(active, e.Get("id"))
			}
		case KindElected:
			if len(active) == 0 {
				r.judge(VLeaseLostQuiet, 1)
				elected[nodeEpoch{e.Get("node"), e.Int("epoch")}] = e.At
			}
		case KindLeadershipEnd:
			k := nodeEpoch{e.Get("node"), e.Int("epoch")}
			start, ok := elected[k]
			delete(elected, k)
			if ok && strings.Contains(e.Get("reason"), "lease_expired") {
				add(VLeaseLostQuiet, e.At, "%s's term at epoch %d, elected %s with no fault active, ended %v later by a lease expiry with none active yet: %s",
					k.node, k.epoch, start.Format("15:04:05.000"), e.At.Sub(start).Round(time.Millisecond), e.Get("reason"))
			}
		}
	}
}
