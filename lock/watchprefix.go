package lock

import (
	"context"
	"fmt"
)

// FeatureWatchPrefix: the Locker is a PrefixWatcher. The interface is the
// declaration: WatchPrefix and a gateway (its Lockgate-Features) take a
// PrefixWatcher that offers FeatureWatch to offer it, so a backend need
// not report it; a client of a gateway reports it when the gateway
// announced it.
const FeatureWatchPrefix Features = FeatureSessions << 1

func init() {
	featureNames = append(featureNames, struct {
		f    Features
		name string
	}{FeatureWatchPrefix, "watchprefix"})
}

// PrefixWatcher is implemented by a Locker that streams the holder changes
// of every key starting with a prefix (a console's view of all keys).
type PrefixWatcher interface {
	// WatchPrefix streams the grants, releases and expiries of every key
	// that starts with prefix ("" watches every key), from the moment it
	// is opened: first one EventSynced (Key is prefix; Revision is where
	// the stream starts: every later event's is greater), then each
	// EventGranted, EventReleased and EventExpired in the order the
	// backend applied them, without gaps, with increasing Revision and
	// Event.Key the changed key. Unlike Watch it sends no EventHolder
	// first: the current holders of a million keys would not fit in a
	// stream's buffer (read them with an inspection of each key).
	//
	// The channel ends as Watch's does: closed when ctx ends or the Locker
	// is closed, or after an EventError when the watch breaks (connection
	// lost, leader changed, ErrWatchOverflow when the reader fell behind
	// every key's changes). The prefix is checked as a key is, except
	// that the empty prefix (every key) is allowed.
	WatchPrefix(ctx context.Context, prefix string) (<-chan Event, error)
}

// WatchPrefix watches every key starting with prefix through l if it is a
// PrefixWatcher that offers FeatureWatch, else fails with an
// *UnsupportedError of FeatureWatchPrefix (matching ErrUnsupported).
func WatchPrefix(ctx context.Context, l Locker, prefix string) (<-chan Event, error) {
	w, ok := l.(PrefixWatcher)
	if !ok || !FeaturesOf(l).Has(FeatureWatch) {
		return nil, &UnsupportedError{Backend: fmt.Sprintf("%T", l), Feature: FeatureWatchPrefix}
	}
	return w.WatchPrefix(ctx, prefix)
}
