package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// ifName is the container side of the veth pair in Bridge mode.
const ifName = "eth0"

// requiredPlugins are the CNI plugins the bundled configuration runs.
var requiredPlugins = []string{"bridge", "host-local"}

// cniNet is the bundled bridge networks, one per bridge of the set: their
// configurations and the libcni handle that runs them.
type cniNet struct {
	conf *libcni.CNIConfig
	nets []cniList // by bridge
	gate cniGate   // shared: the plugins' locks are the host's
}

// cniList is one bridge's network.
type cniList struct {
	list   *libcni.NetworkConfigList
	bridge string
	ipam   string // host-local's data dir: one file per reserved address
}

// conflist renders the bundled configuration: one bridge with the gateway
// at the subnet's first address, masquerade for outbound traffic, and
// host-local IPAM that keeps its reservations under ipamDir.
func conflist(name, bridge string, subnet netip.Prefix, mtu int, ipamDir string) ([]byte, error) {
	gw := subnet.Addr().Next()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      bridge,
			"isGateway":   true,
			"ipMasq":      true,
			"hairpinMode": true,
			// A bridge left by a daemon that gave it the whole subnet
			// takes its slice's gateway instead of refusing the add.
			"forceAddress": true,
			"mtu":          mtu,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": ipamDir,
				"ranges": [][]map[string]string{{{
					"subnet":  subnet.String(),
					"gateway": gw.String(),
				}}},
				"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// findPlugins checks that every required plugin is an executable file in
// one of dirs, and names the first one missing.
func findPlugins(dirs []string) error {
	for _, p := range requiredPlugins {
		found := false
		for _, d := range dirs {
			fi, err := os.Stat(filepath.Join(d, p))
			if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("cni plugin %q not found in %s (install the Debian package containernetworking-plugins): %w",
				p, strings.Join(dirs, ", "), errdefs.ErrUnavailable)
		}
	}
	return nil
}

// newCNINet writes the bundled conflist of each bridge into confDir and
// loads it.
func newCNINet(o *Options, br bridgeSet, mtu int) (*cniNet, error) {
	if err := findPlugins(o.CNIBinDirs); err != nil {
		return nil, err
	}
	ipamDir := filepath.Join(o.CNIConfDir, "ipam")
	for _, d := range []string{o.CNIConfDir, ipamDir, filepath.Join(o.CNIConfDir, "cache")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("cni conf dir: %w", err)
		}
	}
	c := &cniNet{
		// An explicit Exec: libcni would otherwise set one lazily, racing
		// when plugins run concurrently.
		conf: libcni.NewCNIConfigWithCacheDir(o.CNIBinDirs, filepath.Join(o.CNIConfDir, "cache"), &invoke.DefaultExec{
			RawExec:       &invoke.RawExec{Stderr: os.Stderr},
			PluginDecoder: version.PluginDecoder{},
		}),
		gate: newCNIGate(),
	}
	for i, bridge := range br.names {
		name := "shoal-" + bridge
		data, err := conflist(name, bridge, br.slice(i), mtu, ipamDir)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(o.CNIConfDir, name+".conflist")
		if err := writeFileAtomic(file, data); err != nil {
			return nil, fmt.Errorf("cni conflist %s: %w", file, err)
		}
		list, err := libcni.NetworkConfFromBytes(data)
		if err != nil {
			return nil, fmt.Errorf("cni conflist %s: %w", file, err)
		}
		c.nets = append(c.nets, cniList{list: list, bridge: bridge, ipam: filepath.Join(ipamDir, name)})
	}
	return c, nil
}

// writeFileAtomic replaces file with data through a rename.
func writeFileAtomic(file string, data []byte) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (c *cniNet) rt(id, nsPath string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: nsPath, IfName: ifName}
}

// add attaches the namespace at nsPath to bridge br and returns its
// address, gateway and the host side of its veth pair (a port of the
// bridge). A failed add is undone.
func (c *cniNet) add(ctx context.Context, br int, id, nsPath string) (ip, gw net.IP, port string, err error) {
	ctx, leave, err := c.gate.enter(ctx)
	if err != nil {
		return nil, nil, "", fmt.Errorf("cni add %s: %w", id, err)
	}
	defer leave()
	n := c.nets[br]
	res, err := c.conf.AddNetworkList(ctx, n.list, c.rt(id, nsPath))
	if err != nil {
		if derr := c.delIn(context.WithoutCancel(ctx), br, id, nsPath); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, nil, "", fmt.Errorf("cni add %s to %s: %w", id, n.bridge, err)
	}
	ip, gw, err = addresses(res)
	if err == nil {
		port, err = hostPort(res, n.bridge)
	}
	if err != nil {
		if derr := c.delIn(context.WithoutCancel(ctx), br, id, nsPath); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, nil, "", fmt.Errorf("cni add %s to %s: %w", id, n.bridge, err)
	}
	return ip, gw, port, nil
}

// hostPort names the host side of the veth pair in a bridge plugin's
// result: the interface outside any sandbox that is not the bridge.
func hostPort(r types.Result, bridge string) (string, error) {
	cur, err := types100.NewResultFromResult(r)
	if err != nil {
		return "", err
	}
	for _, i := range cur.Interfaces {
		if i.Sandbox == "" && i.Name != bridge {
			return i.Name, nil
		}
	}
	return "", errors.New("no host veth in cni result")
}

// del detaches the attachment id from bridge br. nsPath may be "" when
// the namespace is gone; the plugins then release the address and the
// masquerade rules only.
func (c *cniNet) del(ctx context.Context, br int, id, nsPath string) error {
	ctx, leave, err := c.gate.enter(ctx)
	if err != nil {
		return fmt.Errorf("cni del %s: %w", id, err)
	}
	defer leave()
	return c.delIn(ctx, br, id, nsPath)
}

// delIn is del for a caller that has its turn at the gate.
func (c *cniNet) delIn(ctx context.Context, br int, id, nsPath string) error {
	n := c.nets[br]
	if err := c.conf.DelNetworkList(ctx, n.list, c.rt(id, nsPath)); err != nil {
		return fmt.Errorf("cni del %s from %s: %w", id, n.bridge, err)
	}
	if nsPath == "" {
		return teardownMasq(ctx, n.list.Name, id)
	}
	return nil
}

// cached returns the bridge, address and gateway recorded when id was
// attached; the bridge is -1 when libcni has no record of it.
func (c *cniNet) cached(id, nsPath string) (br int, ip, gw net.IP, err error) {
	for i, n := range c.nets {
		res, err := c.conf.GetNetworkListCachedResult(n.list, c.rt(id, nsPath))
		if err != nil || res == nil {
			continue
		}
		ip, gw, err = addresses(res)
		return i, ip, gw, err
	}
	return -1, nil, nil, fmt.Errorf("cni result of %s: not cached: %w", id, errdefs.ErrNotFound)
}

// attachments maps the ID of every attachment libcni has cached for these
// networks to its bridge.
func (c *cniNet) attachments() (map[string]int, error) {
	atts, err := c.conf.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("cni cache: %w", err)
	}
	byName := map[string]int{}
	for i, n := range c.nets {
		byName[n.list.Name] = i
	}
	ids := map[string]int{}
	for _, a := range atts {
		if br, ok := byName[a.Network]; ok && a.IfName == ifName {
			ids[a.ContainerID] = br
		}
	}
	return ids, nil
}

// addresses picks the first IPv4 address of the container interface.
func addresses(r types.Result) (ip, gw net.IP, err error) {
	cur, err := types100.NewResultFromResult(r)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range cur.IPs {
		if c.Address.IP.To4() != nil {
			return c.Address.IP, c.Gateway, nil
		}
	}
	return nil, nil, errors.New("no IPv4 address in cni result")
}

// hostMTU is the MTU of the interface of the host's default route, 1500 if
// there is none. Veths on the bridge must not be larger.
func hostMTU() int {
	iface := ""
	for _, r := range readRoutes() {
		if r.dst.Bits() == 0 {
			iface = r.iface
			break
		}
	}
	if iface == "" {
		return 1500
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/net", iface, "mtu"))
	if err != nil {
		return 1500
	}
	mtu, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || mtu < 576 {
		return 1500
	}
	return min(mtu, 1500)
}

type route struct {
	iface string
	dst   netip.Prefix
}

// readRoutes parses the IPv4 routes of /proc/net/route.
func readRoutes() []route {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var out []route
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(f[1], 16, 32)
		mask, err2 := strconv.ParseUint(f[7], 16, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		// The file holds addresses in host (little-endian) byte order.
		a := netip.AddrFrom4([4]byte{byte(dst), byte(dst >> 8), byte(dst >> 16), byte(dst >> 24)})
		m := uint32(mask)
		bits := 0
		for m != 0 {
			bits += int(m & 1)
			m >>= 1
		}
		out = append(out, route{iface: f[0], dst: netip.PrefixFrom(a, bits)})
	}
	return out
}

// checkSubnet refuses a subnet that overlaps a route of another interface
// than the bridges: addresses handed out there would be unreachable.
func checkSubnet(subnet netip.Prefix, br bridgeSet) error {
	for _, r := range readRoutes() {
		if br.index(r.iface) >= 0 || r.dst.Bits() == 0 {
			continue
		}
		if r.dst.Overlaps(subnet) {
			return errdefs.Invalid("subnet", "%s overlaps the route %s on %s", subnet, r.dst, r.iface)
		}
	}
	return nil
}
