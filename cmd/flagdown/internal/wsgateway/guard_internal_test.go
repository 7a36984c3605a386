package wsgateway

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"testing/iotest"
)

// clientFrame is a masked client frame (RFC 6455 §5.2) with an n-byte payload of b.
func clientFrame(fin bool, opcode byte, n int, b byte) []byte {
	var f []byte
	first := opcode
	if fin {
		first |= 0x80
	}
	f = append(f, first)
	switch {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, 1, 2, 3, 4) // masking key
	return append(f, bytes.Repeat([]byte{b}, n)...)
}

func guardOutput(t *testing.T, in []byte, maxFrame, maxMessage int64, oneByte bool) ([]byte, []bool) {
	t.Helper()
	var calls []bool
	var r io.Reader = bytes.NewReader(in)
	if oneByte {
		r = iotest.OneByteReader(r) // every header split across reads
	}
	g := &frameGuard{r: r, maxFrame: maxFrame, maxMessage: maxMessage, onTooBig: func(frame bool) { calls = append(calls, frame) }}
	out, err := io.ReadAll(g)
	if err != nil {
		t.Fatal(err)
	}
	return out, calls
}

func TestFrameGuard(t *testing.T) {
	text := clientFrame(true, 0x1, 10, 'a')
	ping := clientFrame(true, 0x9, 4, 'p')
	medium := clientFrame(true, 0x2, 300, 'm') // 16-bit length
	first := clientFrame(false, 0x1, 100, 'f')
	cont := clientFrame(false, 0x0, 100, 'c')
	last := clientFrame(true, 0x0, 10, 'l')
	oversized := clientFrame(true, 0x1, 70000, 'o') // 64-bit length
	closeFrame := clientFrame(true, 0x8, 2, 'x')
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	for _, tc := range []struct {
		name                 string
		in, want             []byte
		maxFrame, maxMessage int64
		calls                []bool
	}{
		{"within the limits", cat(text, ping, medium, first, cont, last), cat(text, ping, medium, first, cont, last), 300, 1000, nil},
		{"frame over the limit dropped, control frames pass", cat(text, oversized, ping, text, closeFrame), cat(text, ping, closeFrame), 32 << 10, 128 << 10, []bool{true}},
		{"message over the limit dropped from the frame that passes it", cat(first, cont, last, ping), cat(first, ping), 300, 150, []bool{false}},
		{"a new message restarts the count", cat(first, last, first, last), cat(first, last, first, last), 300, 110, nil},
	} {
		for _, oneByte := range []bool{false, true} {
			got, calls := guardOutput(t, tc.in, tc.maxFrame, tc.maxMessage, oneByte)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("%s (one byte per read %v): got %d bytes, want %d", tc.name, oneByte, len(got), len(tc.want))
			}
			if len(calls) != len(tc.calls) || len(calls) == 1 && calls[0] != tc.calls[0] {
				t.Errorf("%s (one byte per read %v): onTooBig calls %v, want %v", tc.name, oneByte, calls, tc.calls)
			}
		}
	}
}
