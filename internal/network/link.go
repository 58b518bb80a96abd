package network

import (
	"encoding/binary"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// deleteLink removes the named interface of the host's network namespace
// with an RTM_DELLINK request. A missing interface is not an error.
func deleteLink(name string) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("link %s: netlink socket: %w", name, err)
	}
	defer unix.Close(fd)

	const size = unix.SizeofNlMsghdr + unix.SizeofIfInfomsg
	msg := make([]byte, size)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], size)
	ne.PutUint16(msg[4:], unix.RTM_DELLINK)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], 1) // sequence number
	msg[unix.SizeofNlMsghdr] = unix.AF_UNSPEC
	ne.PutUint32(msg[unix.SizeofNlMsghdr+4:], uint32(ifi.Index))
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("link %s: delete: %w", name, err)
	}

	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("link %s: delete: %w", name, err)
	}
	// The answer is one NLMSG_ERROR message whose error code (0 on
	// success) follows the header.
	if n >= unix.SizeofNlMsghdr+4 && ne.Uint16(buf[4:]) == unix.NLMSG_ERROR {
		if errno := int32(ne.Uint32(buf[unix.SizeofNlMsghdr:])); errno != 0 && unix.Errno(-errno) != unix.ENODEV {
			return fmt.Errorf("link %s: delete: %w", name, unix.Errno(-errno))
		}
	}
	return nil
}
