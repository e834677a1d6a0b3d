package launch

import (
	"errors"
	"fmt"
	"math"
)

// The PMIx wire format, as OpenPMIx 4.1 and later speak it to a client
// that chose the "v41" buffer operations with undescribed buffers (the
// default of Debian 12's libpmix2, 4.2.2, which Open MPI 4.1's daemons
// link):
//
//   - Every pack call writes a count of values (an int32), then the values.
//   - Integers of 16 bits and more (and size_t, status, rank, data type)
//     are "flex128" integers: seven bits a byte, least significant first,
//     the top bit set on every byte but the last, and a ninth byte that
//     holds the top eight bits of a 64-bit value whole. Signed values are
//     first folded so that small magnitudes stay short: n<<1 for n >= 0,
//     (^n)<<1 | 1 for n < 0 (the "zigzag" of protocol buffers).
//   - Bytes, booleans, commands and scopes are one byte each.
//   - A string is its length counting a terminating NUL (an int32; 0 for
//     no string), then its bytes and the NUL.
//   - A value is its data type (a uint16), then the datum; an info is a
//     key (a string), directive flags (a uint32) and a value; a kval a key
//     and a value; a proc a namespace (a string) and a rank (a uint32).
//   - A byte object is its size (a size_t), then its bytes; a buffer the
//     buffer's type (a byte), its size (a size_t) and its bytes.
//
// The numbers below are OpenPMIx's (include/pmix_common.h and
// src/include/pmix_globals.h); pmixwire_test.go checks the encodings
// byte by byte against them.

// PMIx data types this client writes or reads.
const (
	pmixUndef      = 0
	pmixBool       = 1
	pmixByte       = 2
	pmixString     = 3
	pmixSize       = 4
	pmixPID        = 5
	pmixInt        = 6
	pmixInt8       = 7
	pmixInt16      = 8
	pmixInt32      = 9
	pmixInt64      = 10
	pmixUint       = 11
	pmixUint8      = 12
	pmixUint16     = 13
	pmixUint32     = 14
	pmixUint64     = 15
	pmixStatus     = 20
	pmixByteObject = 27
	pmixPersist    = 30
	pmixScope      = 32
	pmixDataRange  = 33
	pmixCommand    = 34
	pmixDirectives = 35
	pmixDataType   = 36
	pmixProcState  = 37
	pmixProcRank   = 40
	pmixComprStr   = 42 // PMIX_COMPRESSED_STRING: a byte object
	pmixComprBO    = 59 // PMIX_COMPRESSED_BYTE_OBJECT
)

// PMIx commands (pmix_cmd_t), scopes and ranks this client uses.
const (
	pmixCmdCommit   = 2
	pmixCmdFence    = 3
	pmixCmdGet      = 4
	pmixCmdFinalize = 5

	pmixGlobal = 3 // PMIX_GLOBAL: share with every process of the job

	pmixRankWildcard = math.MaxUint32 - 1
)

// pmixPacker builds a PMIx message.
type pmixPacker struct{ b []byte }

// appendFlex appends v as a flex128 integer.
func appendFlex(b []byte, v uint64) []byte {
	for i := 0; i < 8; i++ {
		if v < 0x80 {
			return append(b, byte(v))
		}
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v)) // the ninth byte: the top eight bits
}

// zigzag folds a signed value as flex128 does before it encodes it.
func zigzag(n int64) uint64 { return uint64(n<<1) ^ uint64(n>>63) }

func (p *pmixPacker) count(n int)      { p.b = appendFlex(p.b, zigzag(int64(n))) }
func (p *pmixPacker) rawFlex(v uint64) { p.b = appendFlex(p.b, v) }
func (p *pmixPacker) rawString(s string) {
	p.b = appendFlex(p.b, zigzag(int64(len(s)+1)))
	p.b = append(append(p.b, s...), 0)
}
func (p *pmixPacker) rawValue(typ uint16, v []byte) {
	p.rawFlex(uint64(typ))
	p.b = append(p.b, v...)
}

// byte1 packs one byte-sized value (a command, a scope).
func (p *pmixPacker) byte1(v byte) { p.count(1); p.b = append(p.b, v) }

// size packs one size_t.
func (p *pmixPacker) size(v uint64) { p.count(1); p.rawFlex(v) }

// string packs one string.
func (p *pmixPacker) string(s string) { p.count(1); p.rawString(s) }

// rank packs one process rank.
func (p *pmixPacker) rank(r uint32) { p.count(1); p.rawFlex(uint64(r)) }

// proc packs one process name.
func (p *pmixPacker) proc(nspace string, rank uint32) {
	p.count(1)
	p.rawString(nspace)
	p.rawFlex(uint64(rank))
}

// boolInfo packs one info of a boolean value.
func (p *pmixPacker) boolInfo(key string, v bool) {
	p.count(1)
	p.rawString(key)
	p.rawFlex(0) // no directives
	b := byte(0)
	if v {
		b = 1
	}
	p.rawValue(pmixBool, []byte{b})
}

// appendByteObjectKval appends, unframed, a kval whose value is a byte object:
// the contents of a buffer a commit carries.
func appendByteObjectKval(b []byte, key string, v []byte) []byte {
	q := pmixPacker{b: b}
	q.count(1)
	q.rawString(key)
	q.rawFlex(pmixByteObject)
	q.rawFlex(uint64(len(v)))
	q.b = append(q.b, v...)
	return q.b
}

// buffer packs one buffer of undescribed values.
func (p *pmixPacker) buffer(contents []byte) {
	p.count(1)
	p.b = append(p.b, pmixNonDesc)
	p.rawFlex(uint64(len(contents)))
	p.b = append(p.b, contents...)
}

// errPMIxShort is the end of a message where a value should be.
var errPMIxShort = errors.New("message ends inside a value")

// pmixUnpacker reads a PMIx message.
type pmixUnpacker struct{ b []byte }

// flex reads a flex128 integer of at most bits bits.
func (u *pmixUnpacker) flex(bits int) (uint64, error) {
	v, n, err := decodeFlex(u.b)
	if err != nil {
		return 0, err
	}
	if bits < 64 && v>>bits != 0 {
		return 0, fmt.Errorf("integer %d does not fit in %d bits", v, bits)
	}
	u.b = u.b[n:]
	return v, nil
}

// decodeFlex decodes the flex128 integer at the start of b and returns it
// and its length in bytes.
func decodeFlex(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < 8; i++ {
		if i >= len(b) {
			return 0, 0, errPMIxShort
		}
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	if len(b) < 9 {
		return 0, 0, errPMIxShort
	}
	return v | uint64(b[8])<<56, 9, nil
}

// signed reads a flex128 integer of a signed type of bits bits.
func (u *pmixUnpacker) signed(bits int) (int64, error) {
	v, err := u.flex(bits)
	if err != nil {
		return 0, err
	}
	return int64(v>>1) ^ -int64(v&1), nil
}

// count reads the count of values a pack call wrote and checks that it
// is want.
func (u *pmixUnpacker) count(want int) error {
	n, err := u.signed(32)
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("%d values where %d belong", n, want)
	}
	return nil
}

func (u *pmixUnpacker) bytes(n uint64) ([]byte, error) {
	if uint64(len(u.b)) < n {
		return nil, errPMIxShort
	}
	v := u.b[:n:n]
	u.b = u.b[n:]
	return v, nil
}

func (u *pmixUnpacker) rawString() (string, error) {
	n, err := u.signed(32)
	if err != nil || n == 0 {
		return "", err
	}
	if n < 0 {
		return "", fmt.Errorf("string of %d bytes", n)
	}
	s, err := u.bytes(uint64(n))
	if err != nil {
		return "", err
	}
	if s[n-1] != 0 {
		return "", errors.New("string without its terminating NUL")
	}
	return string(s[:n-1]), nil
}

// status reads one status.
func (u *pmixUnpacker) status() (int32, error) {
	if err := u.count(1); err != nil {
		return 0, err
	}
	v, err := u.signed(32)
	return int32(v), err
}

// byteObject reads one byte object.
func (u *pmixUnpacker) byteObject() ([]byte, error) {
	if err := u.count(1); err != nil {
		return nil, err
	}
	n, err := u.flex(64)
	if err != nil {
		return nil, err
	}
	return u.bytes(n)
}

// proc reads one process name.
func (u *pmixUnpacker) proc() (string, uint32, error) {
	if err := u.count(1); err != nil {
		return "", 0, err
	}
	ns, err := u.rawString()
	if err != nil {
		return "", 0, err
	}
	r, err := u.flex(32)
	return ns, uint32(r), err
}

// kval reads one kval. It returns the bytes of a byte object's value
// (ok true), or ok false for a value of another type, which it skips; a
// type it cannot skip is an error.
func (u *pmixUnpacker) kval() (key string, v []byte, ok bool, err error) {
	if err := u.count(1); err != nil {
		return "", nil, false, err
	}
	if key, err = u.rawString(); err != nil {
		return "", nil, false, err
	}
	typ, err := u.flex(16)
	if err != nil {
		return "", nil, false, err
	}
	switch typ {
	case pmixUndef:
	case pmixBool, pmixByte, pmixInt8, pmixUint8, pmixPersist, pmixScope, pmixDataRange, pmixCommand, pmixProcState:
		_, err = u.bytes(1)
	case pmixString:
		_, err = u.rawString()
	case pmixInt16, pmixUint16, pmixDataType:
		_, err = u.flex(16)
	case pmixInt, pmixInt32, pmixUint, pmixUint32, pmixStatus, pmixDirectives, pmixProcRank, pmixPID:
		_, err = u.flex(32)
	case pmixSize, pmixInt64, pmixUint64:
		_, err = u.flex(64)
	case pmixByteObject, pmixComprStr, pmixComprBO:
		var n uint64
		if n, err = u.flex(64); err == nil {
			v, err = u.bytes(n)
		}
		return key, v, err == nil && typ == pmixByteObject, err
	default:
		err = fmt.Errorf("value of PMIx data type %d, which this client does not read", typ)
	}
	return key, nil, false, err
}

// pmixRecord finds the byte object stored under key for rank in the
// answer to a get: a status, then byte objects that each hold a process
// name and that process's kvals.
func pmixRecord(answer []byte, rank uint32, key string) ([]byte, error) {
	u := pmixUnpacker{answer}
	st, err := u.status()
	if err != nil {
		return nil, fmt.Errorf("PMIx get answer: %w", err)
	}
	if st != 0 {
		return nil, &pmixError{op: "get " + key, status: st}
	}
	for len(u.b) > 0 {
		bo, err := u.byteObject()
		if err != nil {
			return nil, fmt.Errorf("PMIx get answer: %w", err)
		}
		in := pmixUnpacker{bo}
		_, r, err := in.proc()
		if err != nil {
			return nil, fmt.Errorf("PMIx get answer: %w", err)
		}
		for len(in.b) > 0 {
			k, v, ok, err := in.kval()
			if err != nil {
				return nil, fmt.Errorf("PMIx get answer, rank %d: %w", r, err)
			}
			if ok && r == rank && k == key {
				return v, nil
			}
		}
	}
	return nil, fmt.Errorf("PMIx get answer holds no %s of rank %d", key, rank)
}

// pmixError is a status other than success from the PMIx server.
type pmixError struct {
	op     string
	status int32
}

func (e *pmixError) Error() string {
	return fmt.Sprintf("PMIx %s: the server answered status %d (%s)", e.op, e.status, pmixStatusName(e.status))
}

// pmixStatusName names the statuses a server is likely to answer this
// client with (include/pmix_common.h).
func pmixStatusName(s int32) string {
	switch s {
	case -1:
		return "PMIX_ERROR"
	case -24:
		return "PMIX_ERR_TIMEOUT"
	case -27:
		return "PMIX_ERR_BAD_PARAM"
	case -46:
		return "PMIX_ERR_NOT_FOUND"
	case -12:
		return "PMIX_ERR_INVALID_CRED"
	case -25:
		return "PMIX_ERR_UNREACH"
	case -31:
		return "PMIX_ERR_INIT"
	case -47:
		return "PMIX_ERR_NOT_SUPPORTED"
	case -61:
		return "PMIX_ERR_LOST_CONNECTION"
	}
	return "see pmix_common.h"
}

// pmixNonDesc is PMIX_BFROP_BUFFER_NON_DESC: values without their types.
const pmixNonDesc = 1
