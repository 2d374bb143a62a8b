package election

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

// campaigners are the campaigner processes.
type campaigners struct {
	cfg   ElectionConfig
	key   string
	seq   int
	mu    sync.Mutex
	procs map[string]*campaigner
	said  chan said
}

// said is a campaigner's "leading" line, stamped on arrival.
type said struct {
	owner string
	at    time.Time
}

type campaigner struct {
	owner string
	cmd   *exec.Cmd
	done  chan struct{}
}

// start starts one more campaigner process.
func (c *campaigners) start(ctx context.Context) error {
	c.seq++
	owner := fmt.Sprintf("campaigner-%d", c.seq)
	eps := strings.Join(c.cfg.Endpoints, ",")
	var cmd *exec.Cmd
	if c.cfg.Campaigner == CampaignerBuiltin {
		cmd = exec.Command(c.cfg.Bench, "campaign", "--endpoints", eps,
			"--key", c.key, "--ttl", c.cfg.TTL.String(), "--owner", owner)
	} else {
		// The leader's command says so, then sleeps while it leads.
		cmd = exec.Command(c.cfg.Lockgate, "elect", "--endpoints", eps, "--client-id", owner,
			"--key", c.key, "--value", owner, "--ttl", c.cfg.TTL.String(), "--",
			"sh", "-c", `echo "leading $LOCKGATE_FENCING_TOKEN"; exec sleep 86400`)
	}
	// A process group of its own: the kill takes the leader's command
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = c.cfg.Log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("election: starting a campaigner: %w", err)
	}
	p := &campaigner{owner: owner, cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	c.procs[owner] = p
	c.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "leading ") {
				select {
				case c.said <- said{owner, time.Now()}:
				default:
				}
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	return nil
}

// kill SIGKILLs the campaigner's process and its process group (the
// command `lockgate elect` runs while leading).
func (p *campaigner) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.cmd.Process.Signal(syscall.SIGKILL)
}

// awaitLeader waits for a leader above token after that is one of the
// campaigners.
func (c *campaigners) awaitLeader(ctx context.Context, leaders <-chan seen, after lock.Token, timeout time.Duration) (election.Leader, time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ld, ok := <-leaders:
			if !ok {
				return election.Leader{}, time.Time{}, errors.New("election: the observer stopped")
			}
			if ld.Present && ld.Token > after && c.procs[leaderID(ld.Leader)] != nil {
				return ld.Leader, ld.at, nil
			}
		case <-t.C:
			return election.Leader{}, time.Time{}, fmt.Errorf("election: no campaigner led within %v", timeout)
		case <-ctx.Done():
			return election.Leader{}, time.Time{}, ctx.Err()
		}
	}
}

func (c *campaigners) drainSaid() {
	for {
		select {
		case <-c.said:
		default:
			return
		}
	}
}

// awaitSaid waits up to d for owner's "leading" line.
func (c *campaigners) awaitSaid(owner string, d time.Duration) (time.Time, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case s := <-c.said:
			if s.owner == owner {
				return s.at, true
			}
		case <-t.C:
			return time.Time{}, false
		}
	}
}

// stopAll kills every campaigner still running and waits for them.
func (c *campaigners) stopAll() {
	for _, p := range c.procs {
		p.kill()
	}
	for _, p := range c.procs {
		<-p.done
	}
}

// CampaignConfig configures Campaign.
type CampaignConfig struct {
	Endpoints []string
	Key       string
	Owner     string
	TTL       time.Duration
}

// Campaign is one campaigner (the process `lockgate-bench campaign`
// runs): it campaigns for cfg.Key through the SDK with its owner as the
// published value, writes "leading TOKEN" to out once elected, and holds
// the leadership until ctx ends (then it resigns) or the leadership is
// lost (an error).
func Campaign(ctx context.Context, cfg CampaignConfig, out io.Writer) error {
	c, err := client.New(cfg.Endpoints, client.Options{ClientID: cfg.Owner})
	if err != nil {
		return err
	}
	defer c.Close()
	ld, err := election.Campaign(ctx, c, cfg.Key, []byte(cfg.Owner), election.WithTTL(cfg.TTL), election.WithOwner(cfg.Owner))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "leading %d\n", ld.Token())
	select {
	case <-ld.Done():
		return fmt.Errorf("leadership lost: %w", ld.Err())
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return ld.Resign(rctx)
	}
}
