package cli

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/errdefs"
)

func init() { extraCommands = append(extraCommands, newCertCmd) }

func newCertCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Add, list and remove the certificates the proxy serves over HTTPS",
		Long: `The proxy's HTTPS listener (shoal daemon --proxy-tls) serves each name with
the certificate that covers it: one added for the name, else a wildcard for
its parent domain (*.example.test serves every app under --domain
example.test). Certificates are kept in the store, their keys encrypted with
the secrets key; every node of a cluster serves them.`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(newCertAddCmd(g), newCertLsCmd(g), newCertRmCmd(g))
	return cmd
}

func newCertAddCmd(g *globals) *cobra.Command {
	var certFile, keyFile string
	cmd := &cobra.Command{
		Use:   "add DOMAIN --cert FILE --key FILE",
		Short: "Serve a certificate and key from files for DOMAIN (or a *.wildcard)",
		Long: `Add the certificate chain in --cert (PEM, the leaf first) and its private key
in --key for DOMAIN, replacing one added for it before. It is refused when
the key does not go with the certificate, the certificate does not cover
DOMAIN, or it has expired.`,
		Example: `  shoal cert add www.example.test --cert fullchain.pem --key privkey.pem
  shoal cert add '*.example.test' --cert wildcard.pem --key wildcard.key`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if certFile == "" || keyFile == "" {
				return usageErrorf("both --cert FILE and --key FILE are needed")
			}
			cp, err := readPEM("--cert", certFile)
			if err != nil {
				return err
			}
			kp, err := readPEM("--key", keyFile)
			if err != nil {
				return err
			}
			domain := strings.ToLower(args[0])
			if _, err := certs.Check(domain, cp, kp, time.Now()); err != nil {
				return usageErrorf("%s", certError(err, certFile, keyFile))
			}
			var c types.Cert
			if err := g.call(cmd, "POST", "/v1/certs", types.CertRequest{Domain: domain, CertPEM: string(cp), KeyPEM: string(kp)}, &c); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s, issued by %s, until %s)\n", domain, strings.Join(c.Domains, ", "),
				c.Issuer, c.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&certFile, "cert", "", "the certificate chain, PEM, leaf first")
	cmd.Flags().StringVar(&keyFile, "key", "", "its private key, PEM")
	return cmd
}

// certError names the file a certs.Check error is about.
func certError(err error, certFile, keyFile string) string {
	msg := err.Error()
	switch errdefs.Field(err) {
	case "cert":
		return "--cert " + certFile + ": " + strings.TrimPrefix(msg, "cert: ")
	case "key":
		return "--key " + keyFile + ": " + strings.TrimPrefix(msg, "key: ")
	case "domain":
		return "DOMAIN " + strings.TrimPrefix(msg, "domain: ")
	}
	return msg
}

// readPEM reads a PEM file named by flag, bounded.
func readPEM(flag, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErrorf("%s %s: %v", flag, path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, certs.MaxPEM+1))
	switch {
	case err != nil:
		return nil, usageErrorf("%s %s: %v", flag, path, err)
	case len(b) > certs.MaxPEM:
		return nil, usageErrorf("%s %s: larger than %d bytes", flag, path, certs.MaxPEM)
	}
	return b, nil
}

func newCertLsCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the certificates: domains, source, issuer, expiry, last renewal error",
		Example: `  shoal cert ls
  shoal cert ls -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []types.Cert
			if err := g.get(cmd, out, "/v1/certs", &list); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), list)
			}
			var rows [][]string
			for _, c := range list {
				notAfter := "-"
				if !c.NotAfter.IsZero() {
					notAfter = c.NotAfter.UTC().Format(time.RFC3339)
				}
				issuer := c.Issuer
				if c.Pending {
					issuer = "(pending)"
				}
				last := c.LastError
				if last == "" {
					last = "-"
				}
				rows = append(rows, []string{strings.Join(c.Domains, ","), c.Source, issuer, notAfter, last})
			}
			table(cmd.OutOrStdout(), []string{"DOMAINS", "SOURCE", "ISSUER", "NOT AFTER", "LAST ERROR"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func newCertRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm DOMAIN...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove certificates (the proxy stops serving them at once)",
		Example: `  shoal cert rm www.example.test`,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, d := range args {
				d = strings.ToLower(d)
				if err := g.call(cmd, "DELETE", "/v1/certs/"+url.PathEscape(d), nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", d)
			}
			return nil
		},
	}
}
