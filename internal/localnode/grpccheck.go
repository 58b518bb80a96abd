package localnode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/shoal-run/shoal/internal/manifest"
)

// The gRPC health check ([health] grpc = true): one call of
// grpc.health.v1.Health/Check over cleartext HTTP/2 on a connection of its
// own, closed after it, so a frozen replica holds no socket of the
// daemon's. The two messages are tiny and fixed, so they are encoded by
// hand rather than by a gRPC client:
//
//	message HealthCheckRequest  { string service = 1; }
//	message HealthCheckResponse { ServingStatus status = 1; } // SERVING = 1

// grpcHealthPath is the method the check calls.
const grpcHealthPath = "/grpc.health.v1.Health/Check"

// grpcServing is HealthCheckResponse.ServingStatus SERVING.
const grpcServing = 1

var grpcProbeTransport = func() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p, Proxy: nil}
}()

// grpcProbe checks once whether the replica at addr answers SERVING for
// h.GRPCService.
func grpcProbe(ctx context.Context, h manifest.Health, addr, ua string) error {
	cc, err := grpcProbeTransport.NewClientConn(ctx, "http", addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+grpcHealthPath,
		bytes.NewReader(grpcFrame(healthRequest(h.GRPCService))))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", ua)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return fmt.Errorf("%s: %w", grpcHealthPath, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", grpcHealthPath, resp.Status)
	}
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" { // a trailers-only answer
		status = resp.Header.Get("Grpc-Status")
	}
	if status != "0" {
		m := resp.Trailer.Get("Grpc-Message") + resp.Header.Get("Grpc-Message")
		return fmt.Errorf("%s: grpc-status %q %s", grpcHealthPath, status, m)
	}
	st, err := servingStatus(msg)
	if err != nil {
		return fmt.Errorf("%s: %w", grpcHealthPath, err)
	}
	if st != grpcServing {
		return fmt.Errorf("%s: service %q is not serving (status %d)", grpcHealthPath, h.GRPCService, st)
	}
	return nil
}

// healthRequest encodes a HealthCheckRequest for service.
func healthRequest(service string) []byte {
	if service == "" {
		return nil
	}
	b := []byte{1<<3 | 2} // field 1, length-delimited
	b = binary.AppendUvarint(b, uint64(len(service)))
	return append(b, service...)
}

// grpcFrame puts msg in gRPC's length-prefixed framing, uncompressed.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// servingStatus decodes the status of the one HealthCheckResponse framed
// in b (0, UNKNOWN, when the field is left out, as protobuf leaves out
// zero values).
func servingStatus(b []byte) (uint64, error) {
	if len(b) < 5 {
		return 0, errors.New("no answer message")
	}
	if b[0] != 0 {
		return 0, errors.New("a compressed answer message")
	}
	n := binary.BigEndian.Uint32(b[1:5])
	b = b[5:]
	if uint32(len(b)) != n {
		return 0, fmt.Errorf("answer message of %d bytes, framed as %d", len(b), n)
	}
	var status uint64
	for len(b) > 0 {
		key, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errors.New("malformed answer message")
		}
		b = b[k:]
		switch key & 7 {
		case 0: // varint
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return 0, errors.New("malformed answer message")
			}
			if key>>3 == 1 {
				status = v
			}
			b = b[k:]
		case 2: // length-delimited
			l, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < l {
				return 0, errors.New("malformed answer message")
			}
			b = b[k+int(l):]
		case 1:
			if len(b) < 8 {
				return 0, errors.New("malformed answer message")
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return 0, errors.New("malformed answer message")
			}
			b = b[4:]
		default:
			return 0, errors.New("malformed answer message")
		}
	}
	return status, nil
}
