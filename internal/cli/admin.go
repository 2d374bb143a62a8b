package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
)

func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Operate a raftlock cluster's tenants: what each identity holds, and closing all of it",
		Long: `Every request to a lockgate gateway has the named identity of its
credential (a token's name in the tokens file, a client certificate's
common name; docs/security.md, "Tenants"). A raftlock cluster records the
identity of every lease and session in its replicated state:
'lockgate admin identities' lists what each holds, cluster-wide, and
'lockgate admin close-identity NAME' ends every session of NAME (releasing
its leases) and releases its other leases, which clears a flood without a
restart. Both need an admin credential.`,
	}
	cmd.AddCommand(newAdminIdentitiesCmd(), newAdminCloseIdentityCmd())
	return cmd
}

func newAdminIdentitiesCmd() *cobra.Command {
	var (
		af      adminClientFlags
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "identities",
		Short: "List the leases and sessions each identity holds, cluster-wide",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.run(cmd, timeout, func(ctx context.Context, mc *raftlock.MembershipClient) error {
				var errs []error
				for _, addr := range af.endpoints {
					l, err := mc.ListIdentities(ctx, addr)
					if err != nil {
						errs = append(errs, err)
						continue
					}
					if asJSON {
						return printJSON(cmd, l)
					}
					tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "IDENTITY\tLEASES\tSESSIONS")
					for _, u := range l.Identities {
						fmt.Fprintf(tw, "%s\t%d\t%d\n", u.Identity, u.Leases, u.Sessions)
					}
					return tw.Flush()
				}
				return errors.Join(errs...)
			})
		},
	}
	af.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	return cmd
}

func newAdminCloseIdentityCmd() *cobra.Command {
	var (
		af      adminClientFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "close-identity NAME",
		Short: "End every session of an identity and release every lease it holds",
		Long: `End every session of identity NAME (its leases are released with it) and
release its other leases, on the leader. Its clients notice at their next
renewal (their leases are lost) and may acquire again within their
quotas: revoke or rename their token first to keep them out. Recorded in
the audit trail as a force-release naming you.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.run(cmd, timeout, func(ctx context.Context, mc *raftlock.MembershipClient) error {
				var errs []error
				for _, addr := range af.endpoints {
					rep, err := mc.CloseIdentity(ctx, addr, args[0])
					if err != nil {
						errs = append(errs, err)
						if rep != nil && rep.Error != "" && rep.LeaderID != "" {
							return err // the leader answered
						}
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "closed identity %s: %d sessions, %d other leases released\n", args[0], rep.Sessions, rep.Leases)
					return nil
				}
				return errors.Join(errs...)
			})
		},
	}
	af.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the answer")
	return cmd
}
