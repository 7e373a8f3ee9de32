package embedding

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// Integrity records are authenticated (an HMAC-SHA256, the entry's "mac")
// with a key the writers hold outside the media root
// (KINFLOW_CACHE_RECORD_KEY_FILE): whoever can write the media root but not
// read the key cannot rewrite a record to match new bytes. The code covers
// every field the check trusts: the family folder, the seq id, the size,
// the modification and inode change times, the inode number, the SHA-256
// and the synthetic flag.
//
// With a key set, a record whose code fails is forged: its file is set
// aside (quarantined) like a file whose bytes differ, and `cache status` /
// `cache verify` report it. A record without a code (written before the
// key, by a writer without it, or by a step program, which records without
// one) is unauthenticated, like an old-format record: its file is hashed
// before use and, when the bytes match, recorded anew with a code. Without
// a key nothing is authenticated and codes are neither written nor checked
// (a writer without the key drops the code of each record it writes, so
// that a stale code never makes a new record look forged).

// ForgedReason is the reason given for a file set aside because its
// record's authentication code failed.
const ForgedReason = "forged integrity record: its authentication code does not match (the manifest was rewritten by a writer without the record key)"

// recordKey is the process's record key (nil: none); recordKeyFile the
// file it was read from ("" when set directly or none).
var (
	recordKey     atomic.Pointer[[]byte]
	recordKeyFile atomic.Pointer[string]
)

// RecordKeyFile is the file the process's record key was read from (""
// without one): the GPU host hands it to its step programs
// (EnvRecordKeyFile), so that the records they write carry their code.
func RecordKeyFile() string {
	if p := recordKeyFile.Load(); p != nil && HaveRecordKey() {
		return *p
	}
	return ""
}

// EnvRecordKeyFile is the variable that names the record key's file, for
// kinflow's roles (KINFLOW_CACHE_RECORD_KEY_FILE) and its step programs.
const EnvRecordKeyFile = "KINFLOW_CACHE_RECORD_KEY_FILE"

// SetRecordKey sets the key that authenticates integrity records; nil or
// empty: none.
func SetRecordKey(key []byte) {
	if len(key) == 0 {
		recordKey.Store(nil)
		return
	}
	k := bytes.Clone(key)
	recordKey.Store(&k)
}

// HaveRecordKey reports whether a record key is set.
func HaveRecordKey() bool { return recordKey.Load() != nil }

// minRecordKeyBytes is the shortest key accepted.
const minRecordKeyBytes = 16

// LoadRecordKey reads the record key from path (its contents, trailing
// white space left out) and sets it; create makes a new random key there
// (mode 0600) when the file is missing (`kinflow dev`). An empty path sets
// no key.
func LoadRecordKey(path string, create bool) error {
	if path == "" {
		SetRecordKey(nil)
		return nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("cache record key: %w", err)
		}
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return fmt.Errorf("cache record key: %w", err)
		}
		b = []byte(hex.EncodeToString(raw) + "\n")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return LoadRecordKey(path, false) // made meanwhile
		}
		if err != nil {
			return fmt.Errorf("cache record key: %w", err)
		}
		if _, err := f.Write(b); err != nil {
			_ = f.Close()
			return fmt.Errorf("cache record key: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("cache record key: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("cache record key: %w", err)
	}
	key := bytes.TrimRight(b, " \t\r\n")
	if len(key) < minRecordKeyBytes {
		return fmt.Errorf("cache record key %s: %d bytes, want at least %d", path, len(key), minRecordKeyBytes)
	}
	SetRecordKey(key)
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	recordKeyFile.Store(&path)
	return nil
}

// recordScope is what names a family folder in a record's code: its path
// under sequence_info/, else its last element.
func recordScope(dir string) string {
	d := filepath.ToSlash(filepath.Clean(dir))
	if i := strings.LastIndex(d, "/"+SequenceInfoDir+"/"); i >= 0 {
		return d[i+len(SequenceInfoDir)+2:]
	}
	return filepath.Base(d)
}

// recordMAC is the authentication code of a record with key.
func recordMAC(key []byte, scope, sid string, size, mtime, ctime int64, ino uint64, sha string, synthetic bool) [sha256.Size]byte {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	str := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	num := func(v uint64) {
		binary.BigEndian.PutUint64(n[:], v)
		m.Write(n[:])
	}
	str("kinflow cache record v1")
	str(scope)
	str(sid)
	num(uint64(size))
	num(uint64(mtime))
	num(uint64(ctime))
	num(ino)
	str(strings.ToLower(sha))
	if synthetic {
		num(1)
	} else {
		num(0)
	}
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

// recordAuth is what a record's code says.
type recordAuth int

const (
	// authNone: no key, or no code recorded.
	authNone recordAuth = iota
	authOK
	authForged
)

// authOf checks the code mac (hex; empty: none) of a record of dir.
func authOf(scope, sid string, size, mtime, ctime int64, ino uint64, sha string, synthetic bool, mac []byte) recordAuth {
	kp := recordKey.Load()
	if kp == nil || len(mac) == 0 {
		return authNone
	}
	var got [sha256.Size]byte
	if len(mac) != 2*sha256.Size {
		return authForged
	}
	if _, err := hex.Decode(got[:], mac); err != nil {
		return authForged
	}
	want := recordMAC(*kp, scope, sid, size, mtime, ctime, ino, sha, synthetic)
	if !hmac.Equal(got[:], want[:]) {
		return authForged
	}
	return authOK
}

// signEntry sets entry e's code (sid's, in folder dir) from its record
// fields, or drops it when there is no key or no record.
func signEntry(dir, sid string, e map[string]any) {
	kp := recordKey.Load()
	sha, _ := e["sha256"].(string)
	if kp == nil || sha == "" {
		delete(e, "mac")
		return
	}
	synthetic, _ := e["synthetic"].(bool)
	mac := recordMAC(*kp, recordScope(dir), sid, anyInt(e["bytes"]), anyInt(e["mtime_ns"]), anyInt(e["ctime_ns"]),
		uint64(anyInt(e["ino"])), sha, synthetic)
	e["mac"] = hex.EncodeToString(mac[:])
}

// anyInt is a decoded JSON number (or a Go integer) as an int64.
func anyInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	case uint64:
		return int64(x)
	case float64:
		return int64(x)
	case interface{ String() string }:
		return numberInt(x.String())
	}
	return 0
}

// RecordAuth says of r, the record of sid in folder dir, whether its
// authentication code holds (authenticated) or fails (forged); both are
// false without a record key, or for a record without a hash or a code.
func RecordAuth(dir, sid string, r FileRecord) (authenticated, forged bool) {
	s := toSlot(r, true)
	switch s.auth(recordScope(dir), sid) {
	case authOK:
		return true, false
	case authForged:
		return false, true
	}
	return false, false
}
