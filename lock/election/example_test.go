package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock/election"
	"github.com/lockgate/lockgate/lock/locktest"
)

// Two candidates campaign for one election. The first leads until it
// resigns; the second, waiting in Campaign meanwhile, then leads with a
// higher token. The in-memory reference locker of lock/locktest stands in
// for a backend here: any lock.Locker works the same way.
func ExampleCampaign() {
	store := locktest.NewMemStore()
	a, b := store.NewLocker(), store.NewLocker()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lead, err := election.Campaign(ctx, a, "scheduler", []byte("10.0.0.1:8080"), election.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("a leads; its term (fencing token) is", lead.Token())

	// b's Campaign returns only once a no longer leads.
	won := make(chan *election.Leadership, 1)
	go func() {
		next, err := election.Campaign(ctx, b, "scheduler", []byte("10.0.0.2:8080"), election.WithTTL(10*time.Second))
		if err != nil {
			panic(err)
		}
		won <- next
	}()

	// A leader acts until its Done closes, sending Token with every write;
	// here it gives the leadership up.
	if err := lead.Resign(ctx); err != nil {
		panic(err)
	}
	<-lead.Done()
	fmt.Println("a's leadership ended:", lead.Err())

	next := <-won
	fmt.Println("b leads with a higher token:", next.Token() > lead.Token())
	if err := election.Resign(ctx, next); err != nil {
		panic(err)
	}
	// Output:
	// a leads; its term (fencing token) is 1
	// a's leadership ended: lock: lease released
	// b leads with a higher token: true
}

// Current asks once who leads; Observe streams every change of leader.
func ExampleCurrent() {
	store := locktest.NewMemStore()
	candidate, reader := store.NewLocker(), store.NewLocker()
	defer candidate.Close()
	defer reader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cur, err := election.Current(ctx, reader, "scheduler")
	if err != nil {
		panic(err)
	}
	fmt.Println("anyone leading:", cur.Present)

	lead, err := election.Campaign(ctx, candidate, "scheduler", []byte("10.0.0.1:8080"), election.WithOwner("node-1"))
	if err != nil {
		panic(err)
	}
	defer lead.Resign(ctx)
	cur, err = election.Current(ctx, reader, "scheduler")
	if err != nil {
		panic(err)
	}
	fmt.Printf("leader %s at %s, term %d\n", cur.Owner, cur.Value, cur.Token)
	// Output:
	// anyone leading: false
	// leader node-1 at 10.0.0.1:8080, term 1
}

// An observer sees the current leader (none at first), then each new
// leader and each vacancy, in order. Observe needs a Locker with
// lock.FeatureWatch.
func ExampleObserve() {
	store := locktest.NewMemStore()
	a, b, observer := store.NewLocker(), store.NewLocker(), store.NewLocker()
	defer a.Close()
	defer b.Close()
	defer observer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	leaders, err := election.Observe(ctx, observer, "scheduler")
	if err != nil {
		panic(err)
	}
	show := func() {
		ld := <-leaders
		if !ld.Present {
			fmt.Println("no leader")
			return
		}
		fmt.Printf("leader at %s\n", ld.Value)
	}
	show()

	first, err := election.Campaign(ctx, a, "scheduler", []byte("10.0.0.1:8080"))
	if err != nil {
		panic(err)
	}
	show()
	if err := first.Resign(ctx); err != nil {
		panic(err)
	}
	show()
	second, err := election.Campaign(ctx, b, "scheduler", []byte("10.0.0.2:8080"))
	if err != nil {
		panic(err)
	}
	defer second.Resign(ctx)
	show()
	// Output:
	// no leader
	// leader at 10.0.0.1:8080
	// no leader
	// leader at 10.0.0.2:8080
}
